// Package mysqldriver is the MySQL 8 / MariaDB 10.6+ storage driver, for
// *sql.DB opened with github.com/go-sql-driver/mysql (which this package
// does not import: the application does). Its SQL is here; the statements'
// shape is shared with SQLite in sqldriver.
//
// Claims select due rows with FOR UPDATE SKIP LOCKED in a short READ
// COMMITTED transaction (no gap locks, so writers inserting new events never
// wait on a claim), then update exactly those IDs: MySQL forbids updating a
// table that a subquery of the same statement selects from, and has no
// UPDATE … RETURNING.
package mysqldriver

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/sqldriver"
)

//go:embed migration/*.sql
var migrationFS embed.FS

// timeLayout is how DATETIME(6) values are bound: UTC, microseconds.
const timeLayout = "2006-01-02 15:04:05.000000"

// now is the database clock in UTC, whatever the session's time_zone.
const now = `UTC_TIMESTAMP(6)`

// Driver is the shared SQL driver with MySQL's own capabilities: tenant
// discovery, where each tenant's outbox is a database of its own.
type Driver struct {
	*sqldriver.Driver
	db *sql.DB
}

// New returns the driver for the outbox tables in schema: a database name,
// or the connection's current database for "" and "public".
func New(db *sql.DB, schema string) *Driver {
	return &Driver{Driver: sqldriver.New(db, Dialect{}, schemaName(schema)), db: db}
}

// schemaName maps the outbox's default schema to the connection's database.
func schemaName(s string) string {
	if s == "public" {
		return ""
	}
	return s
}

// Dialect is MySQL's part of the shared driver.
type Dialect struct{}

var _ sqldriver.Dialect = Dialect{}

// Name implements sqldriver.Dialect.
func (Dialect) Name() string { return "mysql" }

// Quote quotes one identifier with backticks.
func (Dialect) Quote(s string) string { return quote(s) }

func quote(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// Table returns `schema`.`table`, or `table` in the current database.
func (Dialect) Table(schema, table string) string { return prefix(schema) + quote(table) }

func prefix(schema string) string {
	if s := schemaName(schema); s != "" {
		return quote(s) + "."
	}
	return ""
}

// Now is UTC_TIMESTAMP(6).
func (Dialect) Now() string { return now }

// NowPlusMillis adds the bound milliseconds.
func (Dialect) NowPlusMillis() string { return `(UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND)` }

// FormatTime renders t as bound to DATETIME(6).
func (Dialect) FormatTime(t time.Time) string { return FormatTime(t) }

// FormatTime renders t in UTC with microseconds, as DATETIME(6) stores it.
// Times are bound as text so that the connection's loc setting cannot shift
// them.
func FormatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// ByteLength is LENGTH, which counts bytes (CHAR_LENGTH counts
// characters).
func (Dialect) ByteLength(column string) string { return "LENGTH(" + column + ")" }

// TypeMatch uses LIKE with backslash as the escape character; event_type's
// binary collation makes it case-sensitive.
func (Dialect) TypeMatch(globs []string) (string, []any) {
	conds := make([]string, len(globs))
	args := make([]any, len(globs))
	for i, pat := range driver.LikePatterns(globs) {
		conds[i] = "`event_type` LIKE ? ESCAPE '\\\\'"
		args[i] = pat
	}
	return "(" + strings.Join(conds, " OR ") + ")", args
}

// KeepExisting turns a duplicate primary key into a no-op update of the
// existing row. INSERT IGNORE would skip it too, but would also store a
// truncated or converted value where strict mode refuses a bad one.
func (d Dialect) KeepExisting(table string) string {
	return "\nON DUPLICATE KEY UPDATE " + table + "." + d.Quote("id") + " = " + table + "." + d.Quote("id")
}

// KeySequence marks MySQL's events as ordered per key by key_seq, which
// migration 7's trigger sets from a per-key row it keeps locked until the
// writer's transaction ends (see sqldriver.KeySequenced): AUTO_INCREMENT
// IDs do not follow commit order.
func (Dialect) KeySequence() {}

var _ sqldriver.KeySequenced = Dialect{}

// ForUpdate locks the selected rows until the transaction ends.
func (Dialect) ForUpdate() string { return " FOR UPDATE" }

// ForUpdateSkipLocked locks the selected rows, passing over rows another
// transaction holds.
func (Dialect) ForUpdateSkipLocked() string { return " FOR UPDATE SKIP LOCKED" }

// ByID makes a statement by an ID list look each ID up in the primary key,
// so it locks the listed rows only, in ascending ID order (the order the
// range optimizer visits an IN list in), and never waits on others. Without
// it the optimizer scans the whole table once the IN list is a fair part of
// a small table (a drained outbox), or the status index when the statement
// also tests status (a mark's fence): that locked the rows other relays had
// claimed, and two relays' claims and marks deadlocked (error 1213).
func (Dialect) ByID() string { return byID }

const byID = " FORCE INDEX (PRIMARY)"

// DeleteByID is the multiple-table form of DELETE, the only one that takes
// an index hint.
func (Dialect) DeleteByID(table string) string { return "DELETE " + table + " FROM " + table + byID }

// Index forces the named index.
func (Dialect) Index(name string) string { return " FORCE INDEX (" + quote(name) + ")" }

// Begin starts a READ COMMITTED transaction: its locking reads take record
// locks only, no gap locks that would block writers' inserts or other
// relays' claims, and an UPDATE passes over rows another transaction holds
// that it would not change (a semi-consistent read). Every statement of the
// relay that changes rows runs in one, the single-statement marks too: on
// their own they would run at the session's level, REPEATABLE READ unless
// the application chose otherwise.
func (Dialect) Begin(ctx context.Context, db *sql.DB) (sqldriver.Tx, error) {
	return db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
}

// Transient reports a deadlock victim (1213), whose transaction InnoDB rolled
// back, and a lock wait timeout (1205), after which the driver rolls back.
func (Dialect) Transient(err error) bool {
	n := ErrorNumber(err)
	return n == erLockDeadlock || n == erLockWaitTimeout
}

// schemaArg binds the schema for information_schema lookups: NULL means the
// current database.
func schemaArg(schema string) any { return sqldriver.NullString(schemaName(schema)) }

// TableExists looks table up in information_schema.
func (Dialect) TableExists(ctx context.Context, q sqldriver.Querier, schema, table string) (bool, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.TABLES
WHERE TABLE_SCHEMA = coalesce(?, DATABASE()) AND TABLE_NAME = ?`, schemaArg(schema), table).Scan(&n)
	return n > 0, err
}

// EstimateRows reads InnoDB's row estimate from information_schema.
func (Dialect) EstimateRows(ctx context.Context, q sqldriver.Querier, schema string) (int64, error) {
	var n sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT TABLE_ROWS FROM information_schema.TABLES
WHERE TABLE_SCHEMA = coalesce(?, DATABASE()) AND TABLE_NAME = 'outbox_events'`, schemaArg(schema)).Scan(&n)
	return n.Int64, err
}

// InsertedCount reads the AUTO_INCREMENT counter, which deletes do not
// lower. (MySQL 8 caches information_schema statistics for
// information_schema_stats_expiry seconds; MariaDB reads them live.)
func (Dialect) InsertedCount(ctx context.Context, q sqldriver.Querier, schema string) (int64, error) {
	var n sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT AUTO_INCREMENT - 1 FROM information_schema.TABLES
WHERE TABLE_SCHEMA = coalesce(?, DATABASE()) AND TABLE_NAME = 'outbox_events'`, schemaArg(schema)).Scan(&n)
	return max(n.Int64, 0), err
}

// MySQL error numbers the driver tells apart.
const (
	erBadDB           = 1049 // unknown database
	erNoSuchTable     = 1146
	erLockWaitTimeout = 1205
	erLockDeadlock    = 1213
	// erOptionPrevents is a statement refused because of a server option:
	// read_only or super_read_only among others, told apart by the message.
	erOptionPrevents = 1290
	erReadOnlyTx     = 1792 // cannot execute statement in a READ ONLY transaction
)

// dataErrors are the error numbers by which MySQL and MariaDB refuse a
// statement for the data it carries: retrying it cannot help.
var dataErrors = map[int]bool{
	1048: true, // ER_BAD_NULL_ERROR: column cannot be null
	1062: true, // ER_DUP_ENTRY
	1264: true, // ER_WARN_DATA_OUT_OF_RANGE
	1292: true, // ER_TRUNCATED_WRONG_VALUE: an invalid date, number, …
	1366: true, // ER_TRUNCATED_WRONG_VALUE_FOR_FIELD: "Incorrect string value" (invalid UTF-8)
	1406: true, // ER_DATA_TOO_LONG
	1451: true, // ER_ROW_IS_REFERENCED_2: a foreign key
	1452: true, // ER_NO_REFERENCED_ROW_2: a foreign key
	3140: true, // ER_INVALID_JSON_TEXT (MySQL)
	3819: true, // ER_CHECK_CONSTRAINT_VIOLATED (MySQL)
	4025: true, // ER_CONSTRAINT_FAILED: a CHECK constraint (MariaDB)
}

// IsDataError reports an error number in dataErrors.
func (Dialect) IsDataError(err error) bool { return dataErrors[ErrorNumber(err)] }

// IsNoTable reports a missing table or database.
func (Dialect) IsNoTable(err error) bool {
	n := ErrorNumber(err)
	return n == erNoSuchTable || n == erBadDB
}

// IsReadOnly reports a write refused because the server runs read-only
// (read_only, super_read_only: a replica, a demoted primary) or the session
// is in a read-only transaction.
func (Dialect) IsReadOnly(err error) bool {
	switch ErrorNumber(err) {
	case erReadOnlyTx:
		return true
	case erOptionPrevents:
		return strings.Contains(strings.ToLower(err.Error()), "read-only") ||
			strings.Contains(strings.ToLower(err.Error()), "read_only")
	}
	return false
}

// ErrorNumber returns the MySQL error number in err's chain, 0 if none. It
// reads the Number field of the driver's error by reflection, since this
// package must not import the client library.
func ErrorNumber(err error) int {
	for e := err; e != nil; e = errors.Unwrap(e) {
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			continue
		}
		if f := v.FieldByName("Number"); f.IsValid() && f.Kind() == reflect.Uint16 {
			return int(f.Uint())
		}
	}
	return 0
}

// Migrations returns the embedded migrations.
func (Dialect) Migrations() []sqldriver.Migration { return Migrations() }

// Migrations returns the embedded migrations in version order.
func Migrations() []sqldriver.Migration { return sqldriver.LoadMigrations(migrationFS, "migration") }

func render(sqlText, schema string) string {
	return strings.ReplaceAll(sqlText, "{{schema}}", prefix(schema))
}

func versions(schema string) string { return prefix(schema) + "`outbox_migrations`" }

func versionsDDL(schema string) string {
	return `CREATE TABLE IF NOT EXISTS ` + versions(schema) + ` (
    ` + "`version`" + `    INT NOT NULL PRIMARY KEY,
    ` + "`name`" + `       VARCHAR(255) NOT NULL,
    ` + "`applied_at`" + ` DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`
}

// MigrationSQL renders every migration as one script.
func (Dialect) MigrationSQL(schema string) string {
	var b strings.Builder
	where := "the current database"
	if s := schemaName(schema); s != "" {
		where = "database " + quote(s)
	}
	fmt.Fprintf(&b, "-- outbox schema for MySQL/MariaDB in %s, generated by outbox migrate --print\n", where)
	if s := schemaName(schema); s != "" {
		fmt.Fprintf(&b, "CREATE DATABASE IF NOT EXISTS %s;\n", quote(s))
	}
	for _, m := range Migrations() {
		fmt.Fprintf(&b, "\n-- migration %03d_%s\n%s", m.Version, m.Name, render(m.SQL, schema))
	}
	return b.String()
}

// migrateLockTimeout bounds the wait for another migrator, in seconds.
const migrateLockTimeout = 300

// Migrate applies the missing migrations while holding a named lock
// (GET_LOCK) per database, so concurrent migrators apply each migration
// once. MySQL commits DDL implicitly, so each migration is its own step: a
// migration that fails half way is not recorded and is retried from its
// start (its statements are CREATE TABLE, which then says the table
// exists; drop it by hand after reading the error).
func (Dialect) Migrate(ctx context.Context, db *sql.DB, schema string) ([]sqldriver.Migration, error) {
	return migrateTrack(ctx, db, schema, "outbox_migrate:", versions(schema), Migrations())
}

// migrateTrack applies the migrations ms that the versions table lacks,
// holding the named lock lockPrefix+database.
func migrateTrack(ctx context.Context, db *sql.DB, schema, lockPrefix, versionsTable string, ms []sqldriver.Migration) ([]sqldriver.Migration, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	target := schemaName(schema)
	if target != "" {
		if _, err := conn.ExecContext(ctx, `CREATE DATABASE IF NOT EXISTS `+quote(target)); err != nil {
			return nil, err
		}
	} else if err := conn.QueryRowContext(ctx, `SELECT coalesce(DATABASE(), '')`).Scan(&target); err != nil {
		return nil, err
	} else if target == "" {
		return nil, errors.New("no database selected: name one in the URL (mysql://host/dbname) or pass a schema")
	}
	lock := lockName(lockPrefix, target)
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, lock, migrateLockTimeout).Scan(&got); err != nil {
		return nil, err
	}
	if got.Int64 != 1 {
		return nil, fmt.Errorf("another outbox migrate held the lock %q for %ds", lock, migrateLockTimeout)
	}
	defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), `SELECT RELEASE_LOCK(?)`, lock) }()
	if _, err := conn.ExecContext(ctx, strings.Replace(versionsDDL(schema), versions(schema), versionsTable, 1)); err != nil {
		return nil, err
	}
	return sqldriver.ApplyMissing(ctx, conn, ms, versionsTable, func(s string) string { return render(s, schema) })
}

// lockName is the GET_LOCK name for a database, within MySQL's 64
// characters.
func lockName(prefix, database string) string {
	name := prefix + database
	if len(name) <= 64 {
		return name
	}
	sum := sha256.Sum256([]byte(database))
	return prefix + hex.EncodeToString(sum[:16])
}

// SchemaVersion returns the highest applied migration, 0 for none.
func (d Dialect) SchemaVersion(ctx context.Context, db *sql.DB, schema string) (int, error) {
	ok, err := d.TableExists(ctx, db, schema, "outbox_migrations")
	if err != nil || !ok {
		return 0, err
	}
	return sqldriver.MaxVersion(ctx, db, versions(schema))
}

// RelayUpsert is INSERT … ON DUPLICATE KEY UPDATE with VALUES() (MariaDB
// has no row alias); started_at is decided first, on the old row.
func (d Dialect) RelayUpsert(table string, withDelivery bool) string {
	cols, vals, set := "", "", ""
	if withDelivery {
		cols, vals = ", `ordering`, `ordered_failure`, `leases`", ", ?, ?, ?"
		set = ", `ordering` = VALUES(`ordering`), `ordered_failure` = VALUES(`ordered_failure`), `leases` = VALUES(`leases`)"
	}
	return `INSERT INTO ` + table + " (`relay_id`, `host`, `pid`, `version`, `sink`, `event_types`" + cols + ", `started_at`, `last_seen`, `expires_at`, `last_claim_at`)" + `
VALUES (?, ?, ?, ?, ?, ?` + vals + `, ` + now + `, ` + now + `, ` + d.NowPlusMillis() + `, ?)
ON DUPLICATE KEY UPDATE
    ` + "`started_at` = IF(?, VALUES(`started_at`), `started_at`), `host` = VALUES(`host`), `pid` = VALUES(`pid`), " +
		"`version` = VALUES(`version`), `sink` = VALUES(`sink`), `event_types` = VALUES(`event_types`), " +
		"`last_seen` = VALUES(`last_seen`), `expires_at` = VALUES(`expires_at`), `last_claim_at` = VALUES(`last_claim_at`)" + set
}

// LeaseUpsert is INSERT … ON DUPLICATE KEY UPDATE, whose assignments run
// left to right, each seeing the ones before: acquired_at and holder are
// decided on the old row, then expires_at follows the (new) holder, so it
// moves exactly when this holder held or took the row. VALUES() rather
// than a row alias: MariaDB has no alias.
func (d Dialect) LeaseUpsert(table string) string {
	return `INSERT INTO ` + table + ` (` + "`name`, `holder`, `expires_at`" + `) VALUES (?, ?, ` + d.NowPlusMillis() + `)
ON DUPLICATE KEY UPDATE
    ` + "`acquired_at`" + ` = IF(` + "`holder` = VALUES(`holder`) OR `expires_at` > " + now + ", `acquired_at`, " + now + `),
    ` + "`holder`" + ` = IF(` + "`holder` = VALUES(`holder`) OR `expires_at` <= " + now + ", VALUES(`holder`), `holder`" + `),
    ` + "`expires_at`" + ` = IF(` + "`holder` = VALUES(`holder`), VALUES(`expires_at`), `expires_at`" + `)`
}
