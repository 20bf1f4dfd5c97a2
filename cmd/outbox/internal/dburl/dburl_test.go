package dburl_test

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cmd/outbox/internal/dburl"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxmigrate"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/jackc/puddle/v2.(*Pool[...]).createIdleResources"),
	)
}

func TestParseSQLite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"sqlite:///var/lib/app.db", "file:/var/lib/app.db?"},
		{"sqlite:app.db", "file:app.db?"},
		{"sqlite:data/app%20one.db", "file:data/app%20one.db?"},
		{"file:/tmp/x.db?mode=rwc", "file:/tmp/x.db?"},
		{"sqlite:///tmp/x.db?_pragma=busy_timeout(1)", "file:/tmp/x.db?"},
	} {
		c, err := dburl.Parse(tc.url)
		require.NoError(t, err, tc.url)
		require.Equal(t, dburl.KindSQLite, c.Kind)
		require.True(t, strings.HasPrefix(c.SQLiteDSN, tc.want), "%s: %s", tc.url, c.SQLiteDSN)
		q, err := url.ParseQuery(strings.SplitN(c.SQLiteDSN, "?", 2)[1])
		require.NoError(t, err)
		pragmas := strings.Join(q["_pragma"], " ")
		require.Contains(t, pragmas, "journal_mode(WAL)")
		require.Equal(t, 1, strings.Count(pragmas, "busy_timeout"), "the URL's own busy_timeout wins: %s", pragmas)
	}
	c, err := dburl.Parse("file:/tmp/x.db?mode=rwc")
	require.NoError(t, err)
	require.Contains(t, c.SQLiteDSN, "mode=rwc")

	for _, bad := range []string{"sqlite://relative.db", "sqlite:", "sqlite:///"} {
		_, err := dburl.Parse(bad)
		require.Error(t, err, bad)
	}
}

func TestParseMySQL(t *testing.T) {
	t.Parallel()
	c, err := dburl.Parse("mysql://app:p%40ss%3Aw%2Frd@db.example:3307/shop?tls=skip-verify&timeout=5s")
	require.NoError(t, err)
	require.Equal(t, dburl.KindMySQL, c.Kind)
	require.Equal(t, "app", c.MySQL.User)
	require.Equal(t, "p@ss:w/rd", c.MySQL.Passwd)
	require.Equal(t, "db.example:3307", c.MySQL.Addr)
	require.Equal(t, "shop", c.MySQL.DBName)
	require.True(t, c.MySQL.ParseTime)
	require.Equal(t, "UTC", c.MySQL.Loc.String())
	require.Equal(t, "skip-verify", c.MySQL.TLSConfig)
	require.False(t, c.MySQL.MultiStatements, "the outbox runs one statement at a time")
	require.NotContains(t, c.Redacted, "p%40ss")

	c, err = dburl.Parse("mysql://root@localhost/test")
	require.NoError(t, err)
	require.Equal(t, "localhost:3306", c.MySQL.Addr)

	_, err = dburl.Parse("mysql:///test")
	require.ErrorContains(t, err, "names no host")
}

func TestParseErrorsHidePasswords(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"postgres://u:s3cret@host:notaport/db",
		"mysql://u:s3cret@host/db?timeout=never",
		"redis://u:s3cret@host",
		"postgres://u:s3cret@[::1/db",
	} {
		_, err := dburl.Parse(raw)
		require.Error(t, err, raw)
		require.NotContains(t, err.Error(), "s3cret", raw)
	}
	_, err := dburl.Parse("redis://host")
	require.ErrorIs(t, err, dburl.ErrUnknownScheme)
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"postgres://u:pw@h/db", "sqlite:///a.db", "sqlite:a.db", "file:a.db?x=1", "mysql://u:pw@h:1/d?tls=true", "mysql://u:pw@[::1]/d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := dburl.Parse(raw)
		u, uerr := url.Parse(raw)
		if uerr != nil || u.User == nil {
			return
		}
		pw, ok := u.User.Password()
		if !ok || len(pw) < 4 || strings.Contains(u.User.Username(), pw) || strings.Contains(u.Host+u.Path+u.RawQuery, pw) {
			return
		}
		if err != nil {
			require.NotContains(t, err.Error(), pw)
		} else {
			require.NotContains(t, c.Redacted, pw)
		}
	})
}

func TestOpenSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "app.db")
	db, closer, kind, err := dburl.Open(ctx, "sqlite://"+path, dburl.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, closer.Close()) }()
	require.Equal(t, dburl.KindSQLite, kind)
	require.Equal(t, outbox.DialectSQLite, kind.Dialect())
	_, err = outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{})
	require.NoError(t, err)
	sdb := closer.(*sql.DB)
	var mode string
	require.NoError(t, sdb.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode))
	require.Equal(t, "wal", mode)
	require.NoError(t, outbox.NewManager(db, outbox.ManagerConfig{}).Ping(ctx))
}

func TestOpenMariaDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name, _ := drivertest.MySQLDatabase(t)
	db, closer, kind, err := dburl.Open(ctx, "mysql://root@127.0.0.1:3306/"+name, dburl.Options{MaxConns: 4})
	require.NoError(t, err)
	defer func() { require.NoError(t, closer.Close()) }()
	require.Equal(t, dburl.KindMariaDB, kind)
	require.Equal(t, outbox.DialectMariaDB, kind.Dialect())
	res, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{})
	require.NoError(t, err)
	require.NotEmpty(t, res.Applied)

	// All MaxConns connections stay open when idle: a relay's workers do
	// not reconnect between batches.
	sdb := closer.(*sql.DB)
	var conns []*sql.Conn
	for range 4 {
		c, err := sdb.Conn(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	for _, c := range conns {
		require.NoError(t, c.Close())
	}
	stats := sdb.Stats()
	require.Equal(t, 4, stats.MaxOpenConnections)
	require.Equal(t, 4, stats.Idle)
	require.Zero(t, stats.MaxIdleClosed)

	_, _, _, err = dburl.Open(ctx, "mysql://root:wr0ngpass@127.0.0.1:3306/"+name, dburl.Options{})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "wr0ngpass")
}

func TestOpenPostgresRelayPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, closer, kind, err := dburl.Open(ctx, testutil.DatabaseURL(), dburl.Options{RelayID: "r-42", MaxConns: 2})
	require.NoError(t, err)
	defer func() { require.NoError(t, closer.Close()) }()
	require.Equal(t, dburl.KindPostgres, kind)
	var app string
	require.NoError(t, closer.(dburl.PgPool).QueryRow(ctx, `SHOW application_name`).Scan(&app))
	require.Equal(t, "outbox-relay:r-42", app)
}

func TestSQLiteDSNFor(t *testing.T) {
	t.Parallel()
	c, err := dburl.Parse("file:data/app.db?mode=ro&_pragma=synchronous(FULL)&_txlock=immediate")
	require.NoError(t, err)
	require.Equal(t, "data/app.db", c.SQLitePath)
	dsn := c.SQLiteDSNFor("/tmp/other dir/scratch.db")
	path, query, ok := strings.Cut(dsn, "?")
	require.True(t, ok)
	require.Equal(t, "file:/tmp/other%20dir/scratch.db", path)
	q, err := url.ParseQuery(query)
	require.NoError(t, err)
	require.Equal(t, "immediate", q.Get("_txlock"), "the URL's parameters carry over")
	require.Contains(t, q["_pragma"], "synchronous(FULL)", "the URL's own pragma wins")
	require.Contains(t, q["_pragma"], "journal_mode(WAL)")
	require.NotContains(t, q, "mode", "the new file is read-write")

	c, err = dburl.Parse("sqlite:///var/lib/app.db")
	require.NoError(t, err)
	require.Equal(t, "/var/lib/app.db", c.SQLitePath)
	require.Equal(t, strings.Replace(c.SQLiteDSN, "/var/lib/app.db", "/tmp/s.db", 1), c.SQLiteDSNFor("/tmp/s.db"))
}
