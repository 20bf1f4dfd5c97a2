package mysqldriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/sqldriver"
)

// insertChunk bounds the rows of one INSERT: 9 parameters a row stay far
// below MySQL's 65535 placeholders.
const insertChunk = 2000

// insertColumns and insertValues are one event's part of the INSERT.
const (
	insertColumns = "(`event_type`, `aggregate_type`, `aggregate_id`, `payload`, `headers`, `idempotency_key`, `max_attempts`, `available_at`)"
	insertValues  = `(?, ?, ?, ?, ?, ?, ?, coalesce(?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND))`
	// onDuplicate skips an event whose idempotency key exists. Unlike
	// INSERT IGNORE, which also turns NOT NULL, CHECK, truncation and
	// conversion errors into warnings and stores whatever remains, it acts
	// on unique-key conflicts only, and the only unique key a new row can
	// hit is the idempotency key (id is generated). The no-op assignment
	// leaves the existing row unchanged; it does lock it until the caller's
	// transaction ends.
	onDuplicate = "\nON DUPLICATE KEY UPDATE `id` = `id`"
)

func eventArgs(args []any, e *driver.NewEvent) []any {
	var available any
	if !e.AvailableAt.IsZero() {
		available = FormatTime(e.AvailableAt)
	}
	return append(args, e.EventType, sqldriver.NullString(e.AggregateType), sqldriver.NullString(e.AggregateID),
		string(e.Payload), string(e.Headers), sqldriver.NullString(e.IdempotencyKey), sqldriver.NullInt(e.MaxAttempts),
		available, e.Delay.Microseconds())
}

// InsertReturning is the writer's statement for MariaDB 10.5+: one
// INSERT … RETURNING per batch, one round trip.
type InsertReturning struct{ table string }

var _ sqldriver.Inserter = InsertReturning{}

// NewInsertReturning returns MariaDB's insert for the outbox table in
// schema.
func NewInsertReturning(schema string) InsertReturning {
	return InsertReturning{table: Dialect{}.Table(schema, "outbox_events")}
}

// Insert writes events with one multi-row INSERT … RETURNING per chunk.
// MariaDB returns one row per VALUES row, in order, including a row for an
// event skipped by ON DUPLICATE KEY UPDATE, which carries the existing
// event's ID. Such a row is told apart by its created_at: a row this
// statement inserted has the statement's own UTC_TIMESTAMP(6) there (the
// clock is fixed for a statement), and an ID already returned earlier in the
// batch is a duplicate of that earlier message. Batches without keys skip
// the ON DUPLICATE KEY clause: nothing can collide.
func (i InsertReturning) Insert(ctx context.Context, q sqldriver.TxQuerier, events []driver.NewEvent) ([]int64, error) {
	ids := make([]int64, 0, len(events))
	for chunk := range slices.Chunk(events, insertChunk) {
		got, err := i.insert(ctx, q, chunk)
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
	}
	return ids, nil
}

func (i InsertReturning) insert(ctx context.Context, q sqldriver.TxQuerier, events []driver.NewEvent) ([]int64, error) {
	var b strings.Builder
	b.WriteString("INSERT INTO " + i.table + " " + insertColumns + "\nVALUES ")
	args := make([]any, 0, len(events)*9)
	keyed := false
	for n := range events {
		if n > 0 {
			b.WriteString(", ")
		}
		b.WriteString(insertValues)
		args = eventArgs(args, &events[n])
		keyed = keyed || events[n].IdempotencyKey != ""
	}
	if keyed {
		b.WriteString(onDuplicate)
	}
	b.WriteString("\nRETURNING `id`, `created_at` = UTC_TIMESTAMP(6)")
	rows, err := q.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	ids := make([]int64, 0, len(events))
	seen := map[int64]bool{}
	for rows.Next() {
		var (
			id    int64
			fresh bool
		)
		if err := rows.Scan(&id, &fresh); err != nil {
			return nil, err
		}
		if !fresh || seen[id] {
			id = 0
		} else {
			seen[id] = true
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(ids) != len(events) {
		return nil, fmt.Errorf("mariadb insert returned %d rows for %d events", len(ids), len(events))
	}
	return ids, nil
}

// InsertEach is the writer's statement for MySQL 8, which has no
// INSERT … RETURNING: one INSERT per event, whose result says whether it
// inserted (a new auto-increment ID) or met an existing key (ID 0). It
// costs a round trip per event; MariaDB uses InsertReturning instead.
type InsertEach struct{ sql string }

var _ sqldriver.Inserter = InsertEach{}

// NewInsertEach returns MySQL's insert for the outbox table in schema.
func NewInsertEach(schema string) InsertEach {
	return InsertEach{sql: "INSERT INTO " + Dialect{}.Table(schema, "outbox_events") + " " + insertColumns +
		"\nVALUES " + insertValues + onDuplicate}
}

// ErrNeedsExec is returned when the transaction given to the MySQL writer
// cannot run statements without a result set.
var ErrNeedsExec = errors.New("the MySQL writer needs a transaction with ExecContext (*sql.Tx, *sql.Conn or *sql.DB)")

// Insert writes events one statement each.
func (i InsertEach) Insert(ctx context.Context, q sqldriver.TxQuerier, events []driver.NewEvent) ([]int64, error) {
	ex, ok := q.(interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	})
	if !ok {
		return nil, ErrNeedsExec
	}
	ids := make([]int64, len(events))
	args := make([]any, 0, 9)
	for n := range events {
		res, err := ex.ExecContext(ctx, i.sql, eventArgs(args[:0], &events[n])...)
		if err != nil {
			return nil, err
		}
		// An existing key leaves LAST_INSERT_ID at 0 for the statement,
		// whether or not the connection reports found rows as affected.
		if ids[n], err = res.LastInsertId(); err != nil {
			return nil, err
		}
	}
	return ids, nil
}
