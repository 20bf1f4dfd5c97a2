// Package drivertest is the conformance suite every storage driver passes:
// the writer, claims, leases and fences, backoff and dead letters, crash
// recovery, retention, purge, stats, the operator's and the admin API's
// methods, migrations, and the relay end to end. Run calls it for one
// database; this package's own tests run it against PostgreSQL, SQLite and
// MariaDB, and a new driver is done when it passes.
//
// The harnesses (Postgres, SQLite, MariaDB) give each test a database of its
// own, so every test runs in parallel.
package drivertest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/sqldriver"
)

// Harness opens fresh outbox databases of one kind.
type Harness struct {
	// Name is the database's name in test names.
	Name string
	// Open returns a fresh database for t, removed when t ends; migrated
	// unless empty is set.
	Open func(t testing.TB, empty bool) *DB
	// SkipLocked reports whether a claim passes over rows another
	// transaction has locked (false for SQLite, whose single writer
	// leaves no locked rows to skip).
	SkipLocked bool
	// ExactJSON reports whether payloads come back byte for byte as
	// written (false for PostgreSQL's jsonb, which normalizes them).
	ExactJSON bool
	// Pooled reports that the driver reaches the database through a pooler
	// in transaction mode (PgBouncer), where a session's state does not
	// last: the tests of what needs it (Migrate's advisory lock) do not run.
	Pooled bool
	// NoOrdering, when set, says why the database has no per-aggregate
	// ordering yet: the ordering cases check the refusal and skip with it.
	NoOrdering string
	// LiveInsertCounter reports whether Sample.Inserted counts an insert
	// at once (false for PostgreSQL, whose statistics are flushed late).
	LiveInsertCounter bool
}

// DB is one test's database, with the raw access the suite needs to set up
// situations (expired leases, old events) that would otherwise take time.
type DB struct {
	Database outbox.Database
	// Schema is passed to the outbox configs.
	Schema string
	// Dialect is the writer's dialect for this database.
	Dialect outbox.Dialect
	// Table and Archive are the quoted outbox tables, for raw SQL.
	Table, Archive string
	// Begin starts an application transaction.
	Begin func(ctx context.Context) (AppTx, error)
	// SetTime sets column of table (Table or Archive) to the database clock
	// plus d, for the rows with the given IDs, or for all rows without IDs.
	SetTime func(t testing.TB, table, column string, d time.Duration, ids ...int64)
	// LockRows holds row locks on ids in an open transaction until release
	// is called; nil where SkipLocked is false.
	LockRows func(t testing.TB, ids []int64) (release func())
	// Exec runs statements outside any transaction (a script for
	// MigrationSQL, plain inserts for the SQL contract).
	Exec func(t testing.TB, script string)
	// Reopen, when set, returns the same database through a pool of its
	// own, as another process would reach it.
	Reopen func(t testing.TB) outbox.Database
	// ReopenReadOnly returns the same database through a pool of its own
	// whose every write is refused because the database is read-only, as
	// on a demoted primary.
	ReopenReadOnly func(t testing.TB) outbox.Database
	// Now reads the database clock.
	Now func(t testing.TB) time.Time
	// Count counts the rows of table.
	Count func(t testing.TB, table string) int
}

// AppTx is an application's transaction: pgx on PostgreSQL, database/sql
// elsewhere.
type AppTx interface {
	Write(ctx context.Context, w *outbox.Writer, msgs ...outbox.Message) (outbox.WriteResult, error)
	// Check runs a trivial statement: the transaction is still usable.
	Check(ctx context.Context) error
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// SQLTx adapts *sql.Tx to AppTx.
type SQLTx struct{ Tx *sql.Tx }

// Write writes with WriteSQL.
func (s SQLTx) Write(ctx context.Context, w *outbox.Writer, msgs ...outbox.Message) (outbox.WriteResult, error) {
	return w.WriteSQL(ctx, s.Tx, msgs...)
}

// Check runs SELECT 1.
func (s SQLTx) Check(ctx context.Context) error {
	var one int
	return s.Tx.QueryRowContext(ctx, `SELECT 1`).Scan(&one)
}

// Commit commits.
func (s SQLTx) Commit(context.Context) error { return s.Tx.Commit() }

// Rollback rolls back.
func (s SQLTx) Rollback(context.Context) error { return s.Tx.Rollback() }

// BeginSQL returns a DB.Begin for db.
func BeginSQL(db *sql.DB) func(ctx context.Context) (AppTx, error) {
	return func(ctx context.Context) (AppTx, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		return SQLTx{Tx: tx}, nil
	}
}

// countRows counts table's rows through db.
func countRows(t testing.TB, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// nowFrom reads the clock with query through db.
func nowFrom(t testing.TB, db *sql.DB, query string) time.Time {
	t.Helper()
	var now sqldriver.Time
	if err := db.QueryRowContext(context.Background(), query).Scan(&now); err != nil {
		t.Fatalf("read the database clock: %v", err)
	}
	return now.Time
}
