// Package sqldriver is the storage driver for databases reached through
// database/sql: SQLite (sqlitedriver) and MySQL/MariaDB (mysqldriver). The
// relay's and the operator's statements are the same shape on both, so they
// live here once; each database package supplies a Dialect with its own SQL
// fragments (clock, quoting, locking clauses), its migrations and its
// writer's insert.
//
// Every statement that changes several rows does it as "select the IDs, then
// change exactly those IDs" inside one short transaction: MySQL has no
// UPDATE … RETURNING and forbids selecting from the table it updates in a
// subquery, and the two-step form makes the claim's limit exact on both.
// On MySQL the select takes row locks (FOR UPDATE [SKIP LOCKED]); on SQLite
// the transaction itself is the lock (BEGIN IMMEDIATE: one writer at a time).
//
// This package imports no database client: the application opens *sql.DB
// with the driver it chose.
package sqldriver

import (
	"context"
	"database/sql"
	sqldrv "database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

// Querier is what a statement runs on: *sql.DB, *sql.Conn and *sql.Tx.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Dialect is what differs between the databases this package drives.
type Dialect interface {
	// Name is the database's name in errors ("sqlite", "mysql").
	Name() string
	// Quote quotes one identifier.
	Quote(ident string) string
	// Table returns the quoted, schema-qualified name of table.
	Table(schema, table string) string
	// Now is the database clock as stored in timestamp columns.
	Now() string
	// NowPlusMillis is Now plus the milliseconds bound to its one
	// placeholder (which may be negative).
	NowPlusMillis() string
	// FormatTime renders t as the database stores timestamps, for binding
	// and exact comparison (the fence).
	FormatTime(t time.Time) string
	// ByteLength is the length in bytes of a text column's value, as
	// stored.
	ByteLength(column string) string
	// TypeMatch returns the condition that matches event_type against
	// one of globs (* matches any run of characters, case-sensitively),
	// with its arguments.
	TypeMatch(globs []string) (string, []any)
	// ForUpdate and ForUpdateSkipLocked are appended to the selects that
	// pick rows to change; empty where the transaction itself serializes
	// writers (SQLite).
	ForUpdate() string
	ForUpdateSkipLocked() string
	// ByID follows the table in every statement that reads or changes
	// rows by an ID list (locking selects, UPDATE, INSERT … SELECT):
	// MySQL's optimizer may pick a scan of the whole (small) table or of a
	// status index instead, which would lock, or wait on, every row it
	// reads, rows other relays hold among them. A locking select or a
	// DELETE by IDs must also test a column outside the key (the fence's
	// status, say): one that reads the key alone may still be run as a
	// scan of the whole key, which the hint allows.
	ByID() string
	// DeleteByID is the head of a DELETE of table's rows by an ID list,
	// held to the primary key as ByID holds the other statements.
	DeleteByID(table string) string
	// Index follows the table in a locking select that must read the named
	// index in its order, so that it stops at its LIMIT and locks no row
	// it does not return.
	Index(name string) string
	// KeepExisting ends an INSERT … SELECT … WHERE into table so that a
	// row whose primary key is taken is skipped and the existing row kept,
	// while every other error (a data error above all) still fails the
	// statement: not INSERT IGNORE, which turns those into warnings.
	KeepExisting(table string) string
	// LeaseUpsert is an INSERT of one row of the leases table (name,
	// holder and the lease's length in milliseconds, bound in that order)
	// that, when the name exists, takes the row over only if the holder
	// already holds it or it has expired, by the database clock, and
	// otherwise leaves it as it is.
	LeaseUpsert(table string) string
	// RelayUpsert is an INSERT of one row of the relay heartbeat table
	// (relay_id, host, pid, version, sink, event_types, with withDelivery
	// ordering, ordered_failure and leases, then the row's TTL in
	// milliseconds, last_claim_at or NULL, and whether this is the first
	// beat of a run, bound in that order) that, when the relay_id exists,
	// overwrites the row, keeping started_at unless it is the first beat
	// (and the delivery columns without withDelivery). started_at,
	// last_seen and expires_at (now plus the TTL) come from the database
	// clock.
	RelayUpsert(table string, withDelivery bool) string
	// Begin starts a short write transaction.
	Begin(ctx context.Context, db *sql.DB) (Tx, error)
	// Transient reports an error after which the transaction, once rolled
	// back, can be run again at once: a deadlock victim, a lock wait
	// timeout. Nothing it did stays.
	Transient(err error) bool
	// TableExists reports whether table exists in schema.
	TableExists(ctx context.Context, q Querier, schema, table string) (bool, error)
	// EstimateRows returns the database's estimate of the table's rows.
	EstimateRows(ctx context.Context, q Querier, schema string) (int64, error)
	// InsertedCount returns a running count of rows inserted into
	// outbox_events (the ID counter).
	InsertedCount(ctx context.Context, q Querier, schema string) (int64, error)
	// TableHealth reads the outbox tables' storage and what holds back
	// their cleanup from the catalog, without scanning a table; the error
	// wraps driver.ErrNoTable when outbox_events does not exist.
	TableHealth(ctx context.Context, q Querier, schema string) (driver.TableHealth, error)
	// Migrations returns the embedded migrations.
	Migrations() []Migration
	// MigrationSQL renders every migration for schema as one script.
	MigrationSQL(schema string) string
	// Migrate applies the missing migrations under the dialect's lock.
	Migrate(ctx context.Context, db *sql.DB, schema string) ([]Migration, error)
	// SchemaVersion returns the highest applied migration, 0 for none.
	SchemaVersion(ctx context.Context, db *sql.DB, schema string) (int, error)
	// IsNoTable reports whether err says a table does not exist.
	IsNoTable(err error) bool
	// IsDataError reports whether the database refused a statement for
	// the data it carries (a bad value, a constraint): the same statement
	// would fail again (driver.ErrDataRefused).
	IsDataError(err error) bool
	// IsReadOnly reports whether err is the database refusing a write
	// because it is read-only.
	IsReadOnly(err error) bool
}

// Tx is a short write transaction.
type Tx interface {
	Querier
	Commit() error
	Rollback() error
}

// Driver is an outbox table reached through database/sql.
type Driver struct {
	db      *sql.DB
	d       Dialect
	schema  string
	table   string // quoted outbox_events
	archive string // quoted outbox_events_archive
	cols    string // eventColumns("")
	retried atomic.Int64
	ordered orderedState
}

var _ driver.Driver = (*Driver)(nil)

// New returns the driver for the outbox table in schema.
func New(db *sql.DB, d Dialect, schema string) *Driver {
	return &Driver{
		db: db, d: d, schema: schema,
		table:   d.Table(schema, "outbox_events"),
		archive: d.Table(schema, "outbox_events_archive"),
		cols:    eventColumns(""),
	}
}

// Table is the quoted, schema-qualified outbox table.
func (d *Driver) Table() string { return d.table }

// Dialect is the driver's dialect.
func (d *Driver) Dialect() Dialect { return d.d }

// Retried counts the transactions this driver ran again after a transient
// error (Dialect.Transient), for tests and diagnostics.
func (d *Driver) Retried() int64 { return d.retried.Load() }

// Ping checks the connection and that the table exists.
func (d *Driver) Ping(ctx context.Context) error {
	if err := d.db.PingContext(ctx); err != nil {
		return err
	}
	ok, err := d.d.TableExists(ctx, d.db, d.schema, "outbox_events")
	if err != nil {
		return d.wrap(err)
	}
	if !ok {
		return fmt.Errorf("%w: %s", driver.ErrNoTable, d.table)
	}
	return nil
}

// Migrate applies the missing migrations.
func (d *Driver) Migrate(ctx context.Context) ([]driver.Migration, error) {
	ms, err := d.d.Migrate(ctx, d.db, d.schema)
	return infos(ms), err
}

// MigrationSQL returns every migration as one script.
func (d *Driver) MigrationSQL() string { return d.d.MigrationSQL(d.schema) }

// Migrations lists the embedded migrations.
func (d *Driver) Migrations() []driver.Migration { return infos(d.d.Migrations()) }

// SchemaVersion returns the highest applied migration.
func (d *Driver) SchemaVersion(ctx context.Context) (int, error) {
	return d.d.SchemaVersion(ctx, d.db, d.schema)
}

func infos(ms []Migration) []driver.Migration {
	out := make([]driver.Migration, len(ms))
	for i, m := range ms {
		out[i] = driver.Migration{Version: m.Version, Name: m.Name}
	}
	return out
}

// wrap maps a missing-table error to driver.ErrNoTable and a refused write
// to driver.ErrReadOnly, and marks data errors (Dialect.IsDataError) with
// driver.ErrDataRefused.
func (d *Driver) wrap(err error) error {
	err = WrapError(d.d, err)
	if err != nil && !errors.Is(err, driver.ErrNoTable) && !errors.Is(err, driver.ErrReadOnly) && d.d.IsDataError(err) {
		return fmt.Errorf("%w: %w", driver.ErrDataRefused, err)
	}
	return err
}

// WrapError maps a missing-table error to driver.ErrNoTable and a write
// refused by a read-only database to driver.ErrReadOnly, and leaves others
// as they are.
func WrapError(d Dialect, err error) error {
	if err == nil || errors.Is(err, driver.ErrNoTable) || errors.Is(err, driver.ErrReadOnly) {
		return err
	}
	if d.IsNoTable(err) {
		return fmt.Errorf("%w: %w", driver.ErrNoTable, err)
	}
	if d.IsReadOnly(err) {
		return driver.ReadOnlyError(err)
	}
	return err
}

// transientTries bounds how often a transaction that the database rolled
// back as a deadlock victim or after a lock wait timeout is run: the
// relay's statements take their locks in primary-key order and should not
// meet such errors at all, so a retry here only smooths over a rare one
// (another application's transaction, say) without a warning and a
// backoff in the relay.
const transientTries = 3

// inTx runs fn in a short write transaction and commits it. A transaction
// that fn failed with a transient error is rolled back and run again, up
// to transientTries times in all; fn must therefore set its results anew
// on each run. An error from the commit itself is never retried: the
// commit may have happened.
func (d *Driver) inTx(ctx context.Context, fn func(tx Tx) error) error {
	for try := 1; ; try++ {
		tx, err := d.d.Begin(ctx, d.db)
		if err != nil {
			return d.wrap(err)
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			if try < transientTries && d.d.Transient(err) && ctx.Err() == nil {
				d.retried.Add(1)
				continue
			}
			return d.wrap(err)
		}
		return d.wrap(tx.Commit())
	}
}

// exec runs one statement that changes rows in a transaction of its own
// from Begin, and returns how many rows it changed. On MySQL an autocommit
// statement would run at the session's isolation level, REPEATABLE READ by
// default, whose next-key locks would reach past the statement's own rows.
func (d *Driver) exec(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := d.inTx(ctx, func(tx Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// ConnTx is a transaction begun with a statement (BEGIN IMMEDIATE) on a
// connection of its own, for what database/sql's BeginTx cannot express.
type ConnTx struct {
	*sql.Conn
	ctx  context.Context
	done bool
}

// BeginConn takes a connection from db and runs begin on it.
func BeginConn(ctx context.Context, db *sql.DB, begin string) (*ConnTx, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, begin); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &ConnTx{Conn: conn, ctx: ctx}, nil
}

// Commit commits and returns the connection to the pool.
func (t *ConnTx) Commit() error {
	if t.done {
		return sql.ErrTxDone
	}
	if _, err := t.ExecContext(context.WithoutCancel(t.ctx), "COMMIT"); err != nil {
		_ = t.Rollback()
		return err
	}
	t.done = true
	return t.Close()
}

// Rollback rolls back and returns the connection to the pool; a connection
// whose rollback failed may still be inside the transaction, so it is
// discarded instead.
func (t *ConnTx) Rollback() error {
	if t.done {
		return nil
	}
	t.done = true
	if _, err := t.ExecContext(context.WithoutCancel(t.ctx), "ROLLBACK"); err != nil {
		_ = t.Raw(func(any) error { return sqldrv.ErrBadConn })
		_ = t.Close()
		return err
	}
	return t.Close()
}

// placeholders returns "?, ?, …" for n values.
func placeholders(n int) string {
	if n == 0 {
		return "NULL" // IN (NULL) matches nothing
	}
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func int64Args(ids []int64) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return args
}

func stringArgs(ss []string) []any {
	args := make([]any, len(ss))
	for i, s := range ss {
		args[i] = s
	}
	return args
}

// eventColumns is the column list scanEvent reads; prefix is a table alias
// with its dot, or empty.
func eventColumns(prefix string) string {
	cols := []string{
		"id", "event_type", "aggregate_type", "aggregate_id", "payload", "headers", "idempotency_key",
		"status", "attempts", "max_attempts", "last_error", "available_at", "locked_until", "locked_by",
		"created_at", "updated_at", "processed_at", "lease_expiries",
	}
	for i, c := range cols {
		cols[i] = prefix + c
	}
	return strings.Join(cols, ", ")
}

// scanner is *sql.Rows or *sql.Row.
type scanner interface{ Scan(dest ...any) error }

// scanEvent reads one row in eventColumns order, plus extra trailing
// destinations.
func scanEvent(s scanner, extra ...any) (driver.Event, error) {
	var (
		e                           driver.Event
		aggType, aggID, key         sql.NullString
		lastErr, lockedBy           sql.NullString
		maxAttempts                 sql.NullInt64
		payload, headers            sql.RawBytes
		available, created, updated Time
		lockedUntil, processedAt    Time
	)
	dest := append([]any{&e.ID, &e.EventType, &aggType, &aggID, &payload, &headers, &key, &e.Status,
		&e.Attempts, &maxAttempts, &lastErr, &available, &lockedUntil, &lockedBy, &created, &updated,
		&processedAt, &e.LeaseExpiries}, extra...)
	if err := s.Scan(dest...); err != nil {
		return e, err
	}
	e.AggregateType, e.AggregateID, e.IdempotencyKey = aggType.String, aggID.String, key.String
	e.LastError, e.LockedBy, e.MaxAttempts = lastErr.String, lockedBy.String, int(maxAttempts.Int64)
	e.Payload = append([]byte(nil), payload...)
	var err error
	if e.Headers, err = driver.DecodeHeaders(headers); err != nil {
		return e, fmt.Errorf("event %d: %w", e.ID, err)
	}
	e.AvailableAt, e.LockedUntil, e.CreatedAt = available.Time, lockedUntil.Time, created.Time
	e.UpdatedAt, e.ProcessedAt = updated.Time, processedAt.Time
	return e, nil
}

// queryEvents runs a query whose columns are eventColumns.
func queryEvents(ctx context.Context, q Querier, capacity int, query string, args ...any) ([]driver.Event, error) {
	return queryEventsWith(ctx, q, capacity, nil, query, args...)
}

// queryEventsWith is queryEvents for a query with one more column, scanned
// into extra (unless nil).
func queryEventsWith(ctx context.Context, q Querier, capacity int, extra any, query string, args ...any) ([]driver.Event, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var more []any
	if extra != nil {
		more = []any{extra}
	}
	events := make([]driver.Event, 0, driver.PreSize(capacity))
	for rows.Next() {
		e, err := scanEvent(rows, more...)
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	return events, rows.Err()
}

// queryIDs runs a query whose one column is an ID.
func queryIDs(ctx context.Context, q Querier, query string, args ...any) ([]int64, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
