package sqlitedriver

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/sqldriver"
)

// insertChunk bounds the rows of one INSERT: 9 parameters a row stay far
// below SQLite's 32766 bound parameters.
const insertChunk = 1000

// Insert is the writer's statement for SQLite.
type Insert struct{ table string }

var _ sqldriver.Inserter = Insert{}

// NewInsert returns the writer's insert for the outbox table in schema.
func NewInsert(schema string) Insert { return Insert{table: Dialect{}.Table(schema, "outbox_events")} }

// Insert writes events with one multi-row INSERT per chunk. A duplicate
// idempotency key is skipped by ON CONFLICT … DO NOTHING, which (unlike
// INSERT OR IGNORE) ignores nothing but that unique index's conflicts, so the
// statement, and the caller's transaction, carry on.
//
// RETURNING yields the inserted rows in no promised order, so IDs are mapped
// back to messages by what is certain: rows are inserted in VALUES order and
// AUTOINCREMENT hands out increasing IDs, so the sorted IDs belong to the
// inserted messages in order; a message was inserted unless its key was not
// returned or an earlier message in the batch carried the same key.
func (i Insert) Insert(ctx context.Context, q sqldriver.TxQuerier, events []driver.NewEvent) ([]int64, error) {
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

func (i Insert) insert(ctx context.Context, q sqldriver.TxQuerier, events []driver.NewEvent) ([]int64, error) {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + i.table + ` ("event_type", "aggregate_type", "aggregate_id", "payload", "headers",
    "idempotency_key", "max_attempts", "available_at")
VALUES `)
	args := make([]any, 0, len(events)*9)
	for n, e := range events {
		if n > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`(?, ?, ?, ?, ?, ?, ?, coalesce(?, strftime('%Y-%m-%d %H:%M:%f', 'now', ?)))`)
		var available any
		if !e.AvailableAt.IsZero() {
			available = FormatTime(e.AvailableAt)
		}
		args = append(args, e.EventType, sqldriver.NullString(e.AggregateType), sqldriver.NullString(e.AggregateID),
			string(e.Payload), string(e.Headers), sqldriver.NullString(e.IdempotencyKey), sqldriver.NullInt(e.MaxAttempts),
			available, fmt.Sprintf("%+.3f seconds", e.Delay.Seconds()))
	}
	b.WriteString(`
ON CONFLICT ("idempotency_key") WHERE "idempotency_key" IS NOT NULL DO NOTHING
RETURNING "id", coalesce("idempotency_key", '')`)
	rows, err := q.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var (
		newIDs []int64
		keys   = map[string]bool{}
	)
	for rows.Next() {
		var (
			id  int64
			key string
		)
		if err := rows.Scan(&id, &key); err != nil {
			return nil, err
		}
		newIDs = append(newIDs, id)
		if key != "" {
			keys[key] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Sort(newIDs)
	ids := make([]int64, len(events))
	next := 0
	for n, e := range events {
		if e.IdempotencyKey != "" {
			if !keys[e.IdempotencyKey] {
				continue // existed before, or an earlier message took it
			}
			delete(keys, e.IdempotencyKey)
		}
		if next >= len(newIDs) {
			return nil, fmt.Errorf("sqlite insert returned %d rows for %d events", len(newIDs), len(events))
		}
		ids[n] = newIDs[next]
		next++
	}
	return ids, nil
}
