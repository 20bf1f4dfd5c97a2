package drivertest

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the SQLite driver under test

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/sqldriver"
	"github.com/outboxkit/outbox/internal/driver/sqlitedriver"
)

// SQLite is the harness for the SQLite driver: a database file per test in
// t.TempDir(), on modernc.org/sqlite.
func SQLite() Harness {
	return Harness{Name: "sqlite", Open: openSQLite, ExactJSON: true, LiveInsertCounter: true}
}

// OpenSQLiteFile opens path with the outbox's connection settings. Each
// call is a separate pool, as a separate process would have.
func OpenSQLiteFile(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?"+sqlitedriver.DSNParams)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func openSQLite(t testing.TB, empty bool) *DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.db")
	sdb := OpenSQLiteFile(t, path)
	ctx := context.Background()
	database := outbox.SQLite(sdb)
	if !empty {
		if _, err := database.Driver("").Migrate(ctx); err != nil {
			t.Fatalf("migrate %s: %v", path, err)
		}
	}
	d := sqlitedriver.Dialect{}
	db := &DB{
		Database: database, Dialect: outbox.DialectSQLite,
		Table: d.Table("", "outbox_events"), Archive: d.Table("", "outbox_events_archive"),
		Begin: BeginSQL(sdb),
	}
	db.SetTime = func(t testing.TB, table, column string, dur time.Duration, ids ...int64) {
		t.Helper()
		q := `UPDATE ` + table + ` SET ` + d.Quote(column) + ` = ` + d.NowPlusMillis()
		args := []any{dur.Milliseconds()}
		if len(ids) > 0 {
			q += ` WHERE id IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ") + `)`
			for _, id := range ids {
				args = append(args, id)
			}
		}
		if _, err := sdb.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("set %s: %v", column, err)
		}
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
	db.Reopen = func(t testing.TB) outbox.Database { return outbox.SQLite(OpenSQLiteFile(t, path)) }
	db.ReopenReadOnly = func(t testing.TB) outbox.Database {
		ro, err := sql.Open("sqlite", "file:"+path+"?mode=ro&"+sqlitedriver.DSNParams)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ro.Close() })
		return outbox.SQLite(ro)
	}
	return db
}
