package bench

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // the database/sql driver dburl's DSNs are for

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cmd/outbox/internal/dburl"
)

// sqliteStore runs each scenario in a scratch database file of its own,
// next to the file the URL names (which the bench never opens), or in a
// temporary directory when that directory does not exist or cannot be
// written to.
type sqliteStore struct {
	url *dburl.Config
	dir string
	// tmp is the temporary directory the files are in, removed by close;
	// empty when they are next to the URL's file.
	tmp  string
	info storeInfo
}

// sqliteNow is SQLite's clock in the outbox's stored form.
const sqliteNow = `strftime('%Y-%m-%d %H:%M:%f', 'now')`

var sqliteDialect = sqlDialect{
	now:   sqliteNow,
	lease: fmt.Sprintf(`strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+%d seconds')`, int(referenceLease.Seconds())),
	// No row locks to skip: BEGIN IMMEDIATE holds the only write lock.
	skipLocked: "",
	begin:      beginImmediate,
	wrap:       outbox.SQLite,
	deleteFrom: func(table string) string { return "DELETE FROM " + table },
}

func openSQLite(ctx context.Context, url *dburl.Config, prefix string) (*sqliteStore, error) {
	st := &sqliteStore{url: url, dir: filepath.Dir(url.SQLitePath)}
	// Probe the directory: the scratch files go next to the user's file,
	// on the same disk, when they can.
	if f, err := os.CreateTemp(st.dir, prefix+"probe_*"); err == nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
	} else {
		tmp, err := os.MkdirTemp("", "outbox-bench-")
		if err != nil {
			return nil, fmt.Errorf("create a directory for the scratch files: %w", err)
		}
		st.dir, st.tmp = tmp, tmp
	}
	version, err := sqliteVersion(ctx)
	if err != nil {
		st.close()
		return nil, err
	}
	st.info = storeInfo{kind: "sqlite", server: version, dialect: outbox.DialectSQLite, notes: []string{
		"Each scenario runs in a scratch database file in " + st.dir + ", opened with the URL's pragmas (by default WAL, synchronous=NORMAL, busy_timeout 10 s).",
		"SQLite runs inside the bench process: rss_peak_bytes includes its page caches.",
		"Writers, the relay's claims and its marks take turns on SQLite's single write lock.",
		"total_bytes is page_count × page_size of the whole scratch file (outbox_events, the archive and orders); freed pages stay in the file, so it never shrinks. index_bytes, archive_total_bytes, live_tuples and dead_tuples are PostgreSQL and MySQL/MariaDB only.",
	}}
	return st, nil
}

// sqliteVersion asks the driver's SQLite library for its version, on an
// in-memory database: the URL's own file is never opened.
func sqliteVersion(ctx context.Context) (string, error) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return "", err
	}
	defer func() { _ = db.Close() }()
	var v string
	if err := db.QueryRowContext(ctx, `SELECT sqlite_version()`).Scan(&v); err != nil {
		return "", fmt.Errorf("open SQLite: %w", err)
	}
	return v, nil
}

func (st *sqliteStore) about() storeInfo { return st.info }

func (st *sqliteStore) close() {
	if st.tmp != "" {
		_ = os.RemoveAll(st.tmp)
	}
}

func (st *sqliteStore) create(ctx context.Context, name string) (scratch, error) {
	path := filepath.Join(st.dir, name+".db")
	// O_EXCL: the file removed at the end is always one this call created.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create scratch file: %w", err)
	}
	_ = f.Close()
	s := &sqliteScratch{base: name, path: path, dsn: st.url.SQLiteDSNFor(path)}
	ctl, err := s.openDB(ctx)
	if err != nil {
		return nil, errors.Join(err, s.drop(ctx))
	}
	ctl.SetMaxOpenConns(2)
	s.sqlTables = sqlTables{ctl: ctl, table: `"main"."outbox_events"`, archive: `"main"."outbox_events_archive"`, orders: `"main"."orders"`}
	return s, nil
}

// sqliteScratch is a scratch database file.
type sqliteScratch struct {
	sqlTables
	base, path, dsn string
}

func (s *sqliteScratch) name() string              { return s.base }
func (s *sqliteScratch) label() string             { return s.path }
func (s *sqliteScratch) schema() string            { return "" } // main
func (s *sqliteScratch) database() outbox.Database { return outbox.SQLite(s.ctl) }

func (s *sqliteScratch) openDB(ctx context.Context) (*sql.DB, error) {
	db, err := sql.Open("sqlite", s.dsn)
	if err == nil {
		err = db.PingContext(ctx)
	}
	if err != nil {
		if db != nil {
			_ = db.Close()
		}
		return nil, fmt.Errorf("open scratch file %s: %w", s.path, err)
	}
	return db, nil
}

// drop closes the control connection (the last one: SQLite then
// checkpoints and removes the WAL) and removes the file and whatever WAL,
// shared-memory or journal file is left.
func (s *sqliteScratch) drop(context.Context) error {
	var errs []error
	if s.ctl != nil {
		errs = append(errs, s.ctl.Close())
	}
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		if err := os.Remove(s.path + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove scratch file: %w (remove it by hand)", err))
		}
	}
	return errors.Join(errs...)
}

// prefill inserts the events with a recursive CTE in one statement, then
// checkpoints the WAL into the file, so the drain does not pay for copying
// the pre-fill.
func (s *sqliteScratch) prefill(ctx context.Context, n int, payload []byte, keys int) error {
	_, err := s.ctl.ExecContext(ctx, `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)
INSERT INTO `+s.table+` (event_type, aggregate_type, aggregate_id, payload)
SELECT 'order.created', 'order', CAST(CASE WHEN ? > 0 THEN n % ? ELSE n END AS TEXT), ? FROM g`, n, keys, keys, string(payload))
	if err != nil {
		return fmt.Errorf("pre-fill %d events: %w", n, err)
	}
	return s.settle(ctx)
}

// settle copies the WAL into the database file and empties it.
func (s *sqliteScratch) settle(ctx context.Context) error {
	if _, err := s.ctl.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// tableSize is the whole file's size: SQLite keeps no per-table sizes
// short of scanning every page (the dbstat table).
func (s *sqliteScratch) tableSize(ctx context.Context) (TableSize, error) {
	var ts TableSize
	err := s.ctl.QueryRowContext(ctx, `SELECT p.page_count * s.page_size FROM pragma_page_count() AS p, pragma_page_size() AS s`).Scan(&ts.TotalBytes)
	if err != nil {
		return TableSize{}, fmt.Errorf("read file size: %w", err)
	}
	return ts, nil
}

// truncate deletes every row and resets the AUTOINCREMENT counter, so
// event IDs start at 1 again (orders' rowid does by itself).
func (s *sqliteScratch) truncate(ctx context.Context) (err error) {
	tx, err := beginImmediate(ctx, s.ctl)
	if err != nil {
		return fmt.Errorf("empty the tables: %w", err)
	}
	for _, q := range []string{`DELETE FROM ` + s.orders, `DELETE FROM ` + s.table, `DELETE FROM ` + s.archive,
		`DELETE FROM "main"."sqlite_sequence" WHERE name = 'outbox_events'`} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("empty the tables: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("empty the tables: %w", err)
	}
	return nil
}

func (s *sqliteScratch) createOrders(ctx context.Context) error {
	_, err := s.ctl.ExecContext(ctx, `CREATE TABLE `+s.orders+` (
    "id"          INTEGER PRIMARY KEY,
    "customer"    TEXT NOT NULL,
    "total_cents" INTEGER NOT NULL,
    "created_at"  TEXT NOT NULL DEFAULT (`+sqliteNow+`)
)`)
	if err != nil {
		return fmt.Errorf("create orders table: %w", err)
	}
	return nil
}

func (s *sqliteScratch) pools() pools {
	return &sqlPools{d: sqliteDialect, tables: s.sqlTables, openDB: s.openDB}
}

// immediateTx is a BEGIN IMMEDIATE transaction on a connection of its own:
// it takes SQLite's write lock up front (waiting up to busy_timeout), so the
// select and the update that follows it see the same rows.
type immediateTx struct {
	*sql.Conn
	ctx  context.Context
	done bool
}

func beginImmediate(ctx context.Context, db *sql.DB) (sqlTx, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &immediateTx{Conn: conn, ctx: ctx}, nil
}

func (t *immediateTx) Commit() error {
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

// Rollback rolls back; a connection whose rollback failed may still be in
// the transaction, so it is discarded rather than returned to the pool.
func (t *immediateTx) Rollback() error {
	if t.done {
		return nil
	}
	t.done = true
	if _, err := t.ExecContext(context.WithoutCancel(t.ctx), "ROLLBACK"); err != nil {
		_ = t.Raw(func(any) error { return driver.ErrBadConn })
		_ = t.Close()
		return err
	}
	return t.Close()
}
