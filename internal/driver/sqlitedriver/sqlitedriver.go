// Package sqlitedriver is the SQLite storage driver, for *sql.DB opened with
// a pure-Go or cgo SQLite driver (the outbox CLI uses modernc.org/sqlite).
// Its SQL is here; the statements' shape is shared with MySQL in sqldriver.
//
// SQLite has one writer at a time: every statement that changes rows runs in
// a BEGIN IMMEDIATE transaction, which takes the write lock up front (waiting
// up to the connection's busy_timeout) instead of failing to upgrade a read
// lock half way. Relays in several processes on one file stay correct: the
// claim's select and update happen under that lock, and leases and fences
// work as on PostgreSQL. Open the database in WAL mode with a busy timeout
// so readers never block the writer (see DSNParams).
package sqlitedriver

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/outboxkit/outbox/internal/driver/sqldriver"
)

//go:embed migration/*.sql
var migrationFS embed.FS

// SchemaDefault is the attached database that holds the outbox tables when
// the outbox's default schema ("public") is asked for.
const SchemaDefault = "main"

// DSNParams are the connection settings the outbox needs, as
// modernc.org/sqlite query parameters: WAL so that readers and the single
// writer do not block each other, a busy timeout so that a writer waits for
// the lock instead of failing at once, and NORMAL synchronous, which is
// durable in WAL mode except for the last commits at a power loss.
const DSNParams = "_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"

// timeLayout is how timestamps are stored: SQLite's
// strftime('%Y-%m-%d %H:%M:%f'), UTC, milliseconds.
const timeLayout = "2006-01-02 15:04:05.000"

// now is the database clock in the stored form.
const now = `strftime('%Y-%m-%d %H:%M:%f', 'now')`

// New returns the driver for the outbox tables in schema (an attached
// database's name; "" and "public" mean main).
func New(db *sql.DB, schema string) *sqldriver.Driver {
	return sqldriver.New(db, Dialect{}, schemaName(schema))
}

func schemaName(s string) string {
	if s == "" || s == "public" {
		return SchemaDefault
	}
	return s
}

// Dialect is SQLite's part of the shared driver.
type Dialect struct{}

var _ sqldriver.Dialect = Dialect{}

// Name implements sqldriver.Dialect.
func (Dialect) Name() string { return "sqlite" }

// Quote quotes one identifier.
func (Dialect) Quote(s string) string { return quote(s) }

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Table returns schema.table, quoted.
func (Dialect) Table(schema, table string) string {
	return quote(schemaName(schema)) + "." + quote(table)
}

// Now is SQLite's clock, UTC, in the stored form.
func (Dialect) Now() string { return now }

// NowPlusMillis adds the bound milliseconds with a modifier: exact to the
// millisecond, which is the clock's precision.
func (Dialect) NowPlusMillis() string {
	return `strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', ? / 1000.0))`
}

// FormatTime renders t as stored.
func (Dialect) FormatTime(t time.Time) string { return FormatTime(t) }

// FormatTime renders t in UTC as the outbox stores timestamps in SQLite,
// truncated to the millisecond.
func FormatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// ByteLength is length() of the value as a blob: length() of text counts
// characters.
func (Dialect) ByteLength(column string) string { return "length(CAST(" + column + " AS BLOB))" }

// TypeMatch uses GLOB, which is case-sensitive (SQLite's LIKE is not, for
// ASCII): * stays the wildcard, and GLOB's own special characters are
// bracketed to match themselves.
func (Dialect) TypeMatch(globs []string) (string, []any) {
	conds := make([]string, len(globs))
	args := make([]any, len(globs))
	for i, g := range globs {
		conds[i] = `"event_type" GLOB ?`
		args[i] = globEscaper.Replace(g)
	}
	return "(" + strings.Join(conds, " OR ") + ")", args
}

var globEscaper = strings.NewReplacer("?", "[?]", "[", "[[]")

// KeepExisting is an upsert clause that does nothing: unlike INSERT OR
// IGNORE it applies to uniqueness conflicts only, not to NOT NULL or CHECK
// failures. (The SELECT it follows must have a WHERE clause, or SQLite
// would read ON as the start of a join constraint.)
func (Dialect) KeepExisting(string) string { return "\nON CONFLICT DO NOTHING" }

// IDsInCommitOrder marks SQLite's IDs as handed out in commit order: one
// write transaction runs at a time, and AUTOINCREMENT never reuses an ID, so
// the ordered claim orders a key's events by ID.
func (Dialect) IDsInCommitOrder() {}

var _ sqldriver.CommitOrderedIDs = Dialect{}

// ForUpdate is empty: BEGIN IMMEDIATE already holds the only write lock.
func (Dialect) ForUpdate() string { return "" }

// ForUpdateSkipLocked is empty for the same reason: with one writer at a
// time there is nothing locked to skip, and a selected row cannot change
// before the update that follows it in the same transaction.
func (Dialect) ForUpdateSkipLocked() string { return "" }

// ByID is empty: SQLite takes no row locks.
func (Dialect) ByID() string { return "" }

// DeleteByID is a plain DELETE, for the same reason.
func (Dialect) DeleteByID(table string) string { return "DELETE FROM " + table }

// Index is empty: the planner's choice locks nothing.
func (Dialect) Index(string) string { return "" }

// Transient is false: a busy database is waited out by busy_timeout, and
// BEGIN IMMEDIATE leaves no deadlock to retry.
func (Dialect) Transient(error) bool { return false }

// Begin starts a BEGIN IMMEDIATE transaction on a connection of its own.
func (Dialect) Begin(ctx context.Context, db *sql.DB) (sqldriver.Tx, error) {
	return sqldriver.BeginConn(ctx, db, "BEGIN IMMEDIATE")
}

// TableExists looks table up in the schema's sqlite_master.
func (Dialect) TableExists(ctx context.Context, q sqldriver.Querier, schema, table string) (bool, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT count(*) FROM `+quote(schemaName(schema))+`.sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&n)
	return n > 0, err
}

// EstimateRows counts the rows: SQLite keeps no row estimate, and a count
// over the primary key of an embedded file is cheap at the sizes SQLite is
// used for.
func (Dialect) EstimateRows(ctx context.Context, q sqldriver.Querier, schema string) (int64, error) {
	var n int64
	err := q.QueryRowContext(ctx, `SELECT count(*) FROM `+quote(schemaName(schema))+`."outbox_events"`).Scan(&n)
	return n, err
}

// InsertedCount reads AUTOINCREMENT's counter: the highest ID ever given,
// which deletes do not lower.
func (Dialect) InsertedCount(ctx context.Context, q sqldriver.Querier, schema string) (int64, error) {
	var n sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT max(seq) FROM `+quote(schemaName(schema))+`.sqlite_sequence WHERE name = 'outbox_events'`).Scan(&n)
	return n.Int64, err
}

// IsNoTable reports SQLite's "no such table" (SQLITE_ERROR, told apart by
// its message: the result code is shared by every SQL error).
func (Dialect) IsNoTable(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such table")
}

// SQLite's primary result codes for a statement refused for its data.
const (
	sqliteTooBig     = 18 // SQLITE_TOOBIG: a string or blob over the limit
	sqliteConstraint = 19 // SQLITE_CONSTRAINT: CHECK, NOT NULL, UNIQUE, a trigger's RAISE(ABORT)
	sqliteMismatch   = 20 // SQLITE_MISMATCH: a datatype mismatch
)

// IsDataError reports a constraint, too-big or datatype-mismatch error,
// extended codes included.
func (Dialect) IsDataError(err error) bool {
	switch ErrorCode(err) & 0xff {
	case sqliteTooBig, sqliteConstraint, sqliteMismatch:
		return true
	}
	return false
}

// ErrorCode returns the SQLite result code in err's chain, 0 if none:
// from a Code() int method (modernc.org/sqlite) or an integer Code field
// (mattn/go-sqlite3), since this package must not import a client library.
func ErrorCode(err error) int {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		return coded.Code()
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			continue
		}
		if f := v.FieldByName("Code"); f.IsValid() && f.CanInt() {
			return int(f.Int())
		}
	}
	return 0
}

// IsReadOnly reports SQLITE_READONLY: the file, its directory or the
// connection (mode=ro) does not allow writing.
func (Dialect) IsReadOnly(err error) bool {
	return err != nil && strings.Contains(err.Error(), "readonly database")
}

// Migrations returns the embedded migrations.
func (Dialect) Migrations() []sqldriver.Migration { return Migrations() }

// Migrations returns the embedded migrations in version order.
func Migrations() []sqldriver.Migration { return sqldriver.LoadMigrations(migrationFS, "migration") }

func render(sqlText, schema string) string {
	return strings.ReplaceAll(sqlText, "{{schema}}", quote(schemaName(schema)))
}

// MigrationSQL renders every migration as one script.
func (Dialect) MigrationSQL(schema string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- outbox schema for SQLite database %s, generated by outbox migrate --print\n", quote(schemaName(schema)))
	b.WriteString("-- Open the database with journal_mode=WAL and a busy_timeout (see docs/databases.md).\n")
	for _, m := range Migrations() {
		fmt.Fprintf(&b, "\n-- migration %03d_%s\n%s", m.Version, m.Name, render(m.SQL, schema))
	}
	return b.String()
}

func versions(schema string) string { return quote(schemaName(schema)) + `."outbox_migrations"` }

func versionsDDL(schema string) string {
	return `CREATE TABLE IF NOT EXISTS ` + versions(schema) + ` (
    "version"    INTEGER PRIMARY KEY,
    "name"       TEXT NOT NULL,
    "applied_at" TEXT NOT NULL DEFAULT (` + now + `)
)`
}

// Migrate applies the missing migrations in one BEGIN IMMEDIATE transaction:
// SQLite's DDL is transactional, and the write lock makes a concurrent
// migrator wait, then find nothing left to do.
func (Dialect) Migrate(ctx context.Context, db *sql.DB, schema string) ([]sqldriver.Migration, error) {
	tx, err := sqldriver.BeginConn(ctx, db, "BEGIN IMMEDIATE")
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, versionsDDL(schema)); err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	applied, err := sqldriver.ApplyMissing(ctx, tx, Migrations(), versions(schema), func(s string) string { return render(s, schema) })
	if err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return applied, tx.Commit()
}

// SchemaVersion returns the highest applied migration, 0 for none.
func (d Dialect) SchemaVersion(ctx context.Context, db *sql.DB, schema string) (int, error) {
	ok, err := d.TableExists(ctx, db, schema, "outbox_migrations")
	if err != nil || !ok {
		return 0, err
	}
	return sqldriver.MaxVersion(ctx, db, versions(schema))
}

// RelayUpsert is an upsert that keeps started_at unless the last bound
// value says this is a run's first beat.
func (d Dialect) RelayUpsert(table string, withDelivery bool) string {
	cols, vals, set := "", "", ""
	if withDelivery {
		cols, vals = `, "ordering", "ordered_failure", "leases"`, `, ?, ?, ?`
		set = `, "ordering" = excluded."ordering", "ordered_failure" = excluded."ordered_failure", "leases" = excluded."leases"`
	}
	return `INSERT INTO ` + table + ` ("relay_id", "host", "pid", "version", "sink", "event_types"` + cols + `, "started_at", "last_seen", "expires_at", "last_claim_at")
VALUES (?, ?, ?, ?, ?, ?` + vals + `, ` + now + `, ` + now + `, ` + d.NowPlusMillis() + `, ?)
ON CONFLICT ("relay_id") DO UPDATE
SET "started_at" = CASE WHEN ? THEN excluded."started_at" ELSE "started_at" END,
    "host" = excluded."host", "pid" = excluded."pid", "version" = excluded."version", "sink" = excluded."sink",
    "event_types" = excluded."event_types", "last_seen" = excluded."last_seen",
    "expires_at" = excluded."expires_at", "last_claim_at" = excluded."last_claim_at"` + set
}

// LeaseUpsert is an upsert whose DO UPDATE has a WHERE: a row another
// holder holds and that has not expired is left alone.
func (d Dialect) LeaseUpsert(table string) string {
	return `INSERT INTO ` + table + ` ("name", "holder", "expires_at") VALUES (?, ?, ` + d.NowPlusMillis() + `)
ON CONFLICT ("name") DO UPDATE
SET "acquired_at" = CASE WHEN "holder" = excluded."holder" THEN "acquired_at" ELSE ` + now + ` END,
    "holder" = excluded."holder", "expires_at" = excluded."expires_at"
WHERE "holder" = excluded."holder" OR "expires_at" <= ` + now
}
