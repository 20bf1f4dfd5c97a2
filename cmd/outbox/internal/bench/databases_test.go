package bench_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/cmd/outbox/internal/bench"
	"github.com/outboxkit/outbox/cmd/outbox/internal/dburl"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/internal/testutil"
)

// The databases every scenario test runs on.
const (
	postgres = "postgres"
	sqlite   = "sqlite"
	mariadb  = "mariadb"
)

var databases = []string{postgres, sqlite, mariadb}

// bundle is a Runner on one database whose scratch spaces share a prefix
// of their own.
type bundle struct {
	ctx    context.Context
	kind   string
	url    *dburl.Config
	runner *bench.Runner
	prefix string
	// scratches lists the scratch spaces (schemas, files, databases) whose
	// name starts with prefix.
	scratches func(t *testing.T) []string
}

// setup returns a bundle on kind whose Runner is configured by cfg, with
// tiny defaults for what cfg leaves unset.
func setup(t *testing.T, kind string, cfg bench.Config) bundle {
	t.Helper()
	b := newBundle(t, kind)
	b.start(t, cfg)
	return b
}

// newBundle returns a bundle on kind without a Runner yet. A failed test
// may leave scratch spaces behind; cleanup removes them, and the
// assertions check that the bench itself never does.
func newBundle(t *testing.T, kind string) bundle {
	t.Helper()
	var r [4]byte
	_, _ = rand.Read(r[:])
	b := bundle{ctx: context.Background(), kind: kind, prefix: "outbox_bench_t" + hex.EncodeToString(r[:]) + "_"}
	var raw string
	switch kind {
	case postgres:
		raw = testutil.DatabaseURL()
		pool := testutil.Pool(t)
		b.scratches = func(t *testing.T) []string {
			t.Helper()
			rows, err := pool.Query(b.ctx, `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)`, b.prefix)
			require.NoError(t, err)
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			return names
		}
		t.Cleanup(func() {
			for _, s := range b.scratches(t) {
				testutil.DropSchema(t, pool, s)
			}
		})
	case sqlite:
		dir := t.TempDir()
		// The user's file: the bench puts its scratch files next to it and
		// never opens it.
		app := filepath.Join(dir, "app.db")
		raw = "sqlite://" + app
		b.scratches = func(t *testing.T) []string {
			t.Helper()
			files, err := filepath.Glob(filepath.Join(dir, b.prefix+"*"))
			require.NoError(t, err)
			_, err = os.Stat(app)
			require.ErrorIs(t, err, os.ErrNotExist, "the URL's own file is never created")
			// A scratch file and its -wal and -shm files are one space.
			var names []string
			for _, f := range files {
				f = strings.TrimSuffix(strings.TrimSuffix(f, "-wal"), "-shm")
				if !slices.Contains(names, f) {
					names = append(names, f)
				}
			}
			return names
		}
	case mariadb:
		// The URL's database does not exist: the bench never uses it.
		raw = mariaDBURL(t, "outbox_bench_never_created")
		admin := mariaDBAdmin(t)
		b.scratches = func(t *testing.T) []string {
			t.Helper()
			return mariaDBDatabases(t, admin, b.prefix)
		}
		t.Cleanup(func() {
			for _, s := range b.scratches(t) {
				_, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+s+"`")
			}
			require.Empty(t, mariaDBDatabases(t, admin, "outbox_bench_never_created"))
		})
	default:
		t.Fatalf("unknown database %q", kind)
	}
	u, err := dburl.Parse(raw)
	require.NoError(t, err)
	b.url = u
	return b
}

// start sets b.runner.
func (b *bundle) start(t *testing.T, cfg bench.Config) {
	t.Helper()
	if cfg.Events == 0 {
		cfg.Events = 500
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 100
	}
	if cfg.Writers == 0 {
		cfg.Writers = 2
	}
	if cfg.Duration == 0 {
		cfg.Duration = time.Second
	}
	cfg.SchemaPrefix = b.prefix
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := bench.Open(b.ctx, b.url, cfg)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	b.runner = r
}

// mariaDBURL is a mysql:// URL for the test server (TEST_MYSQL_DSN) naming
// database.
func mariaDBURL(t *testing.T, database string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(drivertest.MySQLDSN())
	require.NoError(t, err, "TEST_MYSQL_DSN")
	u := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + database, User: url.User(cfg.User)}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	}
	return u.String()
}

// mariaDBAdmin is a pool on the test server, closed when t ends.
func mariaDBAdmin(t *testing.T) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(drivertest.MySQLDSN())
	require.NoError(t, err, "TEST_MYSQL_DSN")
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.PingContext(context.Background()),
		"MariaDB is not reachable at TEST_MYSQL_DSN (default %s): start it or set TEST_MYSQL_DSN", drivertest.MySQLDSNDefault)
	return db
}

// mariaDBDatabases lists the databases whose name starts with prefix.
func mariaDBDatabases(t *testing.T, admin *sql.DB, prefix string) []string {
	t.Helper()
	rows, err := admin.QueryContext(context.Background(), `SELECT SCHEMA_NAME FROM information_schema.SCHEMATA`)
	require.NoError(t, err)
	defer func() { _ = rows.Close() }()
	var names []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		if strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
	}
	require.NoError(t, rows.Err())
	return names
}
