package main_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
)

// mariaDBTenants creates the tenant databases prefix+name for each name,
// dropped when the test ends, and returns the prefix and the names.
func mariaDBTenants(t *testing.T, admin *sql.DB, names ...string) (string, []string) {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "tc_" + hex.EncodeToString(b[:]) + "_"
	var out []string
	for _, n := range names {
		s := prefix + n
		q := "`" + strings.ReplaceAll(s, "`", "``") + "`"
		_, err := admin.ExecContext(context.Background(), "CREATE DATABASE "+q+" CHARACTER SET utf8mb4")
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+q) })
		out = append(out, s)
	}
	return prefix, out
}

// mariaDBTable is the quoted outbox table of a tenant database.
func mariaDBTable(schema string) string {
	return "`" + strings.ReplaceAll(schema, "`", "``") + "`.`outbox_events`"
}

// On MySQL/MariaDB each tenant is a database: outbox migrate, relay and
// stats take --tenant-schemas; a database named to inject SQL is served
// like the others, each event with its tenant, none lost, and the stats
// are the SQL counts.
func TestRelayTenantsMariaDB(t *testing.T) {
	t.Parallel()
	admin := mariaDBAdmin(t)
	ctx := context.Background()
	prefix, schemas := mariaDBTenants(t, admin, "a", "q`x'; drop table y; --")
	db := []string{"--database-url", mariaDBURL(t, "")}

	res := run(t, nil, append(db, "migrate", "--tenant-schemas", prefix+"*")...)
	requireOK(t, res)
	lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
	require.Len(t, lines, 3, res.stdout)
	for i, s := range schemas {
		require.True(t, strings.HasPrefix(lines[i], fmt.Sprintf("%q: applied 001_create_outbox_events", s)), lines[i])
	}
	require.Equal(t, "2 tenant schemas, 0 failed", lines[2])
	res = run(t, nil, append(db, "migrate", "--tenant-schemas", prefix+"*")...)
	requireOK(t, res)
	require.Contains(t, res.stdout, fmt.Sprintf("%q: up to date at version", schemas[1]))
	// The server's own databases, and public (the URL's database), are
	// never tenants.
	res = run(t, nil, append(db, "migrate", "--tenant-query", "SELECT 'mysql' UNION ALL SELECT 'public'")...)
	require.Equal(t, 1, res.code, res.stderr)
	require.Equal(t, "\"mysql\": skipped: the name is reserved for the database's own catalogs (on MySQL, public means the URL's database)\n"+
		"\"public\": skipped: the name is reserved for the database's own catalogs (on MySQL, public means the URL's database)\n2 tenant schemas, 2 failed\n", res.stdout)

	const perTenant = 40
	for _, s := range schemas {
		for i := range perTenant {
			_, err := admin.ExecContext(ctx, "INSERT INTO "+mariaDBTable(s)+" (event_type, payload) VALUES ('thing.happened', ?)", fmt.Sprintf(`{"i": %d}`, i))
			require.NoError(t, err)
		}
	}
	processed := func(s string) int {
		var n int
		require.NoError(t, admin.QueryRowContext(ctx, "SELECT count(*) FROM "+mariaDBTable(s)+" WHERE status = 'processed'").Scan(&n))
		return n
	}
	srv := newTenantServer(t, time.Millisecond)
	relay := start(t, nil, append(db, "relay", "--tenant-schemas", prefix+"*", "--sink", srv.URL,
		"--batch-size", "10", "--tenant-refresh", "300ms", "--log-level", "warn")...)
	waitAll := func(want int) {
		testutil.WaitFor(t, 60*time.Second, "every tenant's events processed", func() bool {
			require.False(t, relay.exited(), "relay exited; stderr:\n%s", relay.stderr.String())
			total := 0
			for _, s := range schemas {
				total += processed(s)
			}
			return total == want
		})
	}
	waitAll(2 * perTenant)

	// A tenant created and migrated while the relay runs is served.
	_, err := admin.ExecContext(ctx, "CREATE DATABASE "+"`"+prefix+"late` CHARACTER SET utf8mb4")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+prefix+"late`") })
	requireOK(t, run(t, nil, append(db, "migrate", "--tenant-query", "SELECT '"+prefix+"late'")...))
	schemas = append(schemas, prefix+"late")
	for i := range 5 {
		_, err := admin.ExecContext(ctx, "INSERT INTO "+mariaDBTable(prefix+"late")+" (event_type, payload) VALUES ('thing.happened', ?)", fmt.Sprintf(`{"i": %d}`, i))
		require.NoError(t, err)
	}
	waitAll(2*perTenant + 5)

	// The qualified id percent-encodes the tenant's spaces: decode it.
	acked := map[string]int{}
	for k, n := range srv.ids() {
		k, err := url.PathUnescape(k)
		require.NoError(t, err)
		acked[k] += n
	}
	for i, s := range schemas {
		n := perTenant
		if i == 2 {
			n = 5
		}
		for id := 1; id <= n; id++ {
			require.GreaterOrEqual(t, acked[s+":"+strconv.Itoa(id)], 1, "event %d of %q never delivered", id, s)
		}
	}
	require.Len(t, acked, 2*perTenant+5, "no ghost events, and no tenant's id taken for another's")
	require.Equal(t, 0, relay.stop(t, syscall.SIGTERM), relay.stderr.String())

	// Per-tenant stats are the SQL counts.
	_, err = admin.ExecContext(ctx, "UPDATE "+mariaDBTable(schemas[1])+" SET status = 'failed' WHERE id <= 3")
	require.NoError(t, err)
	_, err = admin.ExecContext(ctx, "UPDATE "+mariaDBTable(schemas[0])+" SET status = 'pending' WHERE id <= 2")
	require.NoError(t, err)
	res = run(t, nil, append(db, "stats", "--tenant-schemas", prefix+"*", "--json")...)
	requireOK(t, res)
	var doc struct {
		Tenants []struct {
			Schema                                 string
			Pending, Processing, Processed, Failed int64
		}
		Pending, Failed int64
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
	require.Len(t, doc.Tenants, 3)
	for _, tn := range doc.Tenants {
		var want [4]int64
		require.NoError(t, admin.QueryRowContext(ctx, "SELECT COALESCE(SUM(status = 'pending'), 0), COALESCE(SUM(status = 'processing'), 0), "+
			"COALESCE(SUM(status = 'processed'), 0), COALESCE(SUM(status = 'failed'), 0) FROM "+mariaDBTable(tn.Schema)).Scan(&want[0], &want[1], &want[2], &want[3]))
		require.Equal(t, want, [4]int64{tn.Pending, tn.Processing, tn.Processed, tn.Failed}, tn.Schema)
	}
	require.Equal(t, int64(2), doc.Pending)
	require.Equal(t, int64(3), doc.Failed)

	// Bulk commands across the tenant databases.
	res = run(t, nil, append(db, "events", "retry", "--status", "failed", "--tenant-schemas", prefix+"*")...)
	requireOK(t, res)
	require.Contains(t, res.stdout, fmt.Sprintf("%q: retried 3 failed events\n", schemas[1]))
	require.Contains(t, res.stdout, "retried 3 failed events in 3 tenant schemas\n")
	res = run(t, nil, append(db, "events", "list", "--tenant-schemas", prefix+"*", "--status", "pending", "--json")...)
	requireOK(t, res)
	require.Equal(t, 5, strings.Count(res.stdout, `"schema"`), res.stdout)
}

// A SQLite file holds one outbox: every command refuses the tenant flags
// with one usage line saying to run one relay per file.
func TestTenantFlagsOnSQLite(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", "sqlite://" + filepath.Join(t.TempDir(), "app.db")}
	for _, args := range [][]string{
		{"relay", "--sink", "stdout:", "--tenant-schemas", "s_*"},
		{"migrate", "--tenant-schemas", "s_*"},
		{"stats", "--tenant-schemas", "s_*"},
		{"stats", "--tenant-query", "SELECT 1", "--json"},
		{"events", "list", "--tenant-schemas", "s_*"},
		{"events", "retry", "--status", "failed", "--tenant-schemas", "s_*"},
		{"purge", "--older-than", "7d", "--tenant-schemas", "s_*"},
	} {
		res := run(t, nil, append(db, args...)...)
		requireFail(t, res, 2, "does not apply to SQLite: a SQLite file holds one outbox (one schema)", "run one relay per file")
	}
}

// One relay process serves the tenant databases of two MariaDB URLs, each
// a user granted its own tenants (so each URL discovers only those); the
// second is reached through a proxy that refuses every connection, at
// start and later for 10 seconds: the first URL's tenants keep flowing, /readyz reports the cut
// one and stays ready, the second's events catch up, and no password
// reaches the logs or the metrics.
func TestRelayTenantsMariaDBTwoDatabasesOneCut(t *testing.T) {
	t.Parallel()
	admin := mariaDBAdmin(t)
	ctx := context.Background()
	prefix, schemas := mariaDBTenants(t, admin, "a", "b")
	requireOK(t, run(t, nil, "--database-url", mariaDBURL(t, ""), "migrate", "--tenant-schemas", prefix+"*"))
	var b [6]byte
	_, _ = rand.Read(b[:])
	password := "pw-" + hex.EncodeToString(b[:])
	users := []string{prefix + "ua", prefix + "ub"}
	for i, u := range users {
		_, err := admin.ExecContext(ctx, "CREATE USER '"+u+"'@'%' IDENTIFIED BY '"+password+"'")
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), "DROP USER IF EXISTS '"+u+"'@'%'") })
		_, err = admin.ExecContext(ctx, "GRANT ALL PRIVILEGES ON `"+strings.ReplaceAll(schemas[i], "_", `\_`)+"`.* TO '"+u+"'@'%'")
		require.NoError(t, err)
	}
	cfg, err := mysql.ParseDSN(drivertest.MySQLDSN())
	require.NoError(t, err)
	proxy := tcpproxy.Start(t, cfg.Addr)
	urlA := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/", User: url.UserPassword(users[0], password)}
	urlB := url.URL{Scheme: "mysql", Host: proxy.Addr(), Path: "/", User: url.UserPassword(users[1], password)}

	insert := func(s string, n int) {
		for i := range n {
			_, err := admin.ExecContext(ctx, "INSERT INTO "+mariaDBTable(s)+" (event_type, payload) VALUES ('thing.happened', ?)", fmt.Sprintf(`{"i": %d}`, i))
			require.NoError(t, err)
		}
	}
	processed := func(s string) int {
		var n int
		require.NoError(t, admin.QueryRowContext(ctx, "SELECT count(*) FROM "+mariaDBTable(s)+" WHERE status = 'processed'").Scan(&n))
		return n
	}
	srv := newTenantServer(t, 0)
	metricsAddr := freeAddr(t)
	// The second server is down when the relay starts: the first's tenants
	// are served at once, the second's once it answers.
	proxy.Refuse()
	relay := start(t, nil, "--database-url", urlA.String(), "--database-url", urlB.String(), "relay",
		"--tenant-schemas", prefix+"*", "--sink", srv.URL, "--db-timeout", "2s", "--lease", "5s", "--log-level", "warn",
		"--tenant-refresh", "500ms", "--metrics-addr", metricsAddr)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + metricsAddr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	labelA := "database " + cfg.Addr + "/"
	labelCut := "database " + proxy.Addr() + "/"

	insert(schemas[0], 5)
	insert(schemas[1], 5)
	testutil.WaitFor(t, 30*time.Second, "the first database flowing while the second is down at start", func() bool {
		require.False(t, relay.exited(), "relay exited; stderr:\n%s", relay.stderr.String())
		return processed(schemas[0]) == 5
	})
	require.Zero(t, processed(schemas[1]))
	proxy.Allow()
	testutil.WaitFor(t, 30*time.Second, "both databases flowing", func() bool {
		require.False(t, relay.exited(), "relay exited; stderr:\n%s", relay.stderr.String())
		return processed(schemas[0]) == 5 && processed(schemas[1]) == 5
	})
	testutil.WaitFor(t, 10*time.Second, "both databases ready", func() bool {
		code, body := get("/readyz")
		return code == http.StatusOK && strings.Contains(body, labelA+": ok\n") && strings.Contains(body, labelCut+": ok\n")
	})
	_, metrics := get("/metrics")
	require.Contains(t, metrics, `database="`+proxy.Addr()+`/"`)
	require.Contains(t, metrics, `database="`+cfg.Addr+`/"`)
	require.NotContains(t, metrics, password)

	proxy.Refuse()
	cutAt := time.Now()
	insert(schemas[0], 5)
	insert(schemas[1], 5)
	testutil.WaitFor(t, 15*time.Second, "the first database flowing while the second is cut", func() bool {
		return processed(schemas[0]) == 10
	})
	testutil.WaitFor(t, 15*time.Second, "the cut database reported, the relay still ready", func() bool {
		code, body := get("/readyz")
		return code == http.StatusOK && strings.Contains(body, labelA+": ok\n") &&
			strings.Contains(body, labelCut+": ") && !strings.Contains(body, labelCut+": ok")
	})
	require.Equal(t, 5, processed(schemas[1]), "the cut database's events cannot have been published")
	insert(schemas[0], 5)
	testutil.WaitFor(t, 15*time.Second, "still flowing", func() bool { return processed(schemas[0]) == 15 })
	for time.Since(cutAt) < 10*time.Second {
		require.False(t, relay.exited(), "relay exited; stderr:\n%s", relay.stderr.String())
		time.Sleep(100 * time.Millisecond)
	}
	proxy.Allow()
	testutil.WaitFor(t, 60*time.Second, "the second database catching up", func() bool {
		return processed(schemas[1]) == 10
	})

	// Each database numbers its events from 1: the ids are qualified by
	// the database's label too, and every event arrived, each tenant's
	// from its own URL only.
	acked := srv.ids()
	require.Len(t, acked, 25, "every event once at least, none taken for another")
	for k := range acked {
		k, err := url.PathUnescape(k)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(k, cfg.Addr+"/:"+schemas[0]+":") || strings.HasPrefix(k, proxy.Addr()+"/:"+schemas[1]+":"), k)
	}
	require.Equal(t, 0, relay.stop(t, syscall.SIGTERM), relay.stderr.String())
	require.NotContains(t, relay.stderr.String(), password)
}

// Several --database-urls may be PostgreSQL, MySQL/MariaDB or both, but
// not SQLite, and not one server twice.
func TestRelayTenantsSeveralDatabaseURLsUsage(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite://" + filepath.Join(t.TempDir(), "app.db")
	res := run(t, nil, "--database-url", mariaDBURL(t, ""), "--database-url", sqlite, "relay", "--sink", "stdout:", "--tenant-schemas", "s_*")
	requireFail(t, res, 2, "invalid --database-url `sqlite://", "several databases need PostgreSQL or MySQL/MariaDB URLs", "run one relay per file")
	res = run(t, nil, "--database-url", "mysql://u:hunter2@db1:3306/app", "--database-url", "mysql://v:hunter3@db1:3306/app", "relay", "--sink", "stdout:", "--tenant-schemas", "s_*")
	requireFail(t, res, 2, "db1:3306/app is named twice")
	require.NotContains(t, res.stderr, "hunter")
}

// One relay process serves the tenant schemas of a PostgreSQL database and
// the tenant databases of a MariaDB server, one glob for both: every event
// of each arrives once, its id qualified by its database.
func TestRelayTenantsPostgresAndMariaDB(t *testing.T) {
	t.Parallel()
	admin := mariaDBAdmin(t)
	ctx := context.Background()
	prefix, my := mariaDBTenants(t, admin, "m")
	pg := prefix + "p"
	pool := testutil.Pool(t)
	t.Cleanup(func() { testutil.DropSchema(t, pool, pg) })
	requireOK(t, run(t, nil, "--database-url", mariaDBURL(t, ""), "migrate", "--tenant-schemas", prefix+"*"))
	requireOK(t, run(t, nil, "--database-url", testutil.DatabaseURL(), "migrate", "--tenant-query", "SELECT '"+pg+"'"))
	for i := range 4 {
		_, err := admin.ExecContext(ctx, "INSERT INTO "+mariaDBTable(my[0])+" (event_type, payload) VALUES ('thing.happened', ?)", fmt.Sprintf(`{"i": %d}`, i))
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO `+testutil.Table(pg)+` (event_type, payload) SELECT 'thing.happened', jsonb_build_object('i', g) FROM generate_series(1, 6) g`)
	require.NoError(t, err)
	srv := newTenantServer(t, 0)
	relay := start(t, nil, "--database-url", testutil.DatabaseURL(), "--database-url", mariaDBURL(t, ""), "relay",
		"--tenant-schemas", prefix+"*", "--sink", srv.URL, "--log-level", "warn", "--tenant-refresh", "500ms")
	testutil.WaitFor(t, 30*time.Second, "both databases' events published", func() bool {
		require.False(t, relay.exited(), "relay exited; stderr:\n%s", relay.stderr.String())
		return len(srv.ids()) == 10
	})
	require.Equal(t, 0, relay.stop(t, syscall.SIGTERM), relay.stderr.String())
	perTenant := map[string]int{}
	for k := range srv.ids() {
		k, err := url.PathUnescape(k)
		require.NoError(t, err)
		parts := strings.Split(k, ":")
		require.Len(t, parts, 4, k) // host:port/name:tenant:id
		perTenant[parts[2]]++
	}
	require.Equal(t, map[string]int{my[0]: 4, pg: 6}, perTenant)
}
