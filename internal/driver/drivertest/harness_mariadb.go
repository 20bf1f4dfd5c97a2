package drivertest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/mysqldriver"
	"github.com/outboxkit/outbox/internal/driver/sqldriver"
)

// MySQLDSNDefault is the local test server (MariaDB 10.11 on this project's
// machines), in go-sql-driver form, without a database.
const MySQLDSNDefault = "root@tcp(127.0.0.1:3306)/"

// MySQLDSN is TEST_MYSQL_DSN, or MySQLDSNDefault.
func MySQLDSN() string {
	if dsn := os.Getenv("TEST_MYSQL_DSN"); dsn != "" {
		return dsn
	}
	return MySQLDSNDefault
}

// MariaDB is the harness for the MySQL driver on MariaDB: a database per
// test, dropped when the test ends. The writer uses DialectMariaDB unless
// dialect says otherwise (DialectMySQL runs the per-message insert that
// MySQL 8 needs).
func MariaDB(dialect outbox.Dialect) Harness {
	name := "mariadb"
	if dialect == outbox.DialectMySQL {
		name = "mariadb-as-mysql"
	}
	return Harness{Name: name, SkipLocked: true, ExactJSON: true, LiveInsertCounter: true,
		Open: func(t testing.TB, empty bool) *DB { return openMariaDB(t, empty, dialect) }}
}

var unsafeName = regexp.MustCompile(`[^a-z0-9_]+`)

// MySQLDatabase creates a database named after t, dropped when t ends, and
// returns its name and a pool on it.
func MySQLDatabase(t testing.TB) (string, *sql.DB) {
	t.Helper()
	cfg, err := mysql.ParseDSN(MySQLDSN())
	if err != nil {
		t.Fatalf("TEST_MYSQL_DSN: %v", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	base := unsafeName.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(base) > 40 {
		base = base[len(base)-40:]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "t_" + base + "_" + hex.EncodeToString(b[:])

	admin := func() *sql.DB {
		c := cfg.Clone()
		c.DBName = ""
		db, err := sql.Open("mysql", c.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := admin()
	_, err = a.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4")
	_ = a.Close()
	if err != nil {
		t.Fatalf("MariaDB/MySQL is not reachable at TEST_MYSQL_DSN (default %s): %v; start it with scripts/test or set TEST_MYSQL_DSN", MySQLDSNDefault, err)
	}
	db, err := sql.Open("mysql", mysqlDSN(t, name))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(16)
	t.Cleanup(func() {
		_ = db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a := admin()
		defer func() { _ = a.Close() }()
		if _, err := a.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return name, db
}

func openMariaDB(t testing.TB, empty bool, dialect outbox.Dialect) *DB {
	t.Helper()
	name, sdb := MySQLDatabase(t)
	ctx := context.Background()
	database := outbox.MySQL(sdb)
	if !empty {
		drv := database.Driver("")
		if _, err := drv.Migrate(ctx); err != nil {
			t.Fatalf("migrate: %v", err)
		}
		// The suite's ordered cases need the key-sequence trigger, which
		// only a schema prepared for ordering has.
		if err := drv.(driver.OrderingPreparer).PrepareOrdering(ctx); err != nil {
			t.Fatalf("prepare ordering: %v", err)
		}
	}
	d := mysqldriver.Dialect{}
	db := &DB{
		Database: database, Dialect: dialect,
		Table: d.Table("", "outbox_events"), Archive: d.Table("", "outbox_events_archive"),
		Begin: BeginSQL(sdb),
	}
	in := func(ids []int64) (string, []any) {
		args := make([]any, len(ids))
		for i, id := range ids {
			args[i] = id
		}
		return ` WHERE id IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ") + `)`, args
	}
	db.SetTime = func(t testing.TB, table, column string, dur time.Duration, ids ...int64) {
		t.Helper()
		q := `UPDATE ` + table + ` SET ` + d.Quote(column) + ` = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND`
		args := []any{dur.Microseconds()}
		if len(ids) > 0 {
			where, idArgs := in(ids)
			q += where
			args = append(args, idArgs...)
		}
		if _, err := sdb.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("set %s: %v", column, err)
		}
	}
	db.LockRows = func(t testing.TB, ids []int64) func() {
		t.Helper()
		tx, err := sdb.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		where, args := in(ids)
		// By the primary key only: a scan of a covering index would lock
		// every row it reads.
		if _, err := tx.ExecContext(ctx, `SELECT id FROM `+db.Table+d.ByID()+where+` FOR UPDATE`, args...); err != nil {
			t.Fatal(err)
		}
		return func() { _ = tx.Rollback() }
	}
	db.Exec = func(t testing.TB, script string) {
		t.Helper()
		for _, stmt := range sqldriver.Statements(script) {
			if _, err := sdb.ExecContext(ctx, stmt); err != nil {
				t.Fatalf("exec %q: %v", stmt, err)
			}
		}
	}
	db.Now = func(t testing.TB) time.Time { return nowFrom(t, sdb, `SELECT `+d.Now()) }
	db.Count = func(t testing.TB, table string) int { return countRows(t, sdb, table) }
	db.Reopen = func(t testing.TB) outbox.Database {
		other, err := sql.Open("mysql", mysqlDSN(t, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = other.Close() })
		return outbox.MySQL(other)
	}
	db.ReopenReadOnly = func(t testing.TB) outbox.Database {
		ro, err := sql.Open("mysql", mysqlDSN(t, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ro.Close() })
		// One session, read-only for good: the shared server's read_only
		// is not the test's to change.
		ro.SetMaxOpenConns(1)
		ro.SetMaxIdleConns(1)
		if _, err := ro.ExecContext(ctx, `SET SESSION TRANSACTION READ ONLY`); err != nil {
			t.Fatal(err)
		}
		return outbox.MySQL(ro)
	}
	return db
}

// mysqlDSN is the test server's DSN for database name, with parseTime and
// UTC.
func mysqlDSN(t testing.TB, name string) string {
	cfg, err := mysql.ParseDSN(MySQLDSN())
	if err != nil {
		t.Fatalf("TEST_MYSQL_DSN: %v", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.DBName = name
	return cfg.FormatDSN()
}
