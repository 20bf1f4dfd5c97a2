package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
)

// tenantPrefix returns a short prefix unique to the test, so that tenant
// names fit PostgreSQL's 63-byte identifiers and a glob of it finds the
// test's tenants alone; every schema with the prefix is dropped at cleanup.
func tenantPrefix(t *testing.T) string {
	t.Helper()
	name := testutil.SchemaName(t)
	prefix := "tc_" + name[len(name)-8:] + "_"
	pool := testutil.Pool(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rows, err := pool.Query(ctx, `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)`, prefix)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, s := range names {
			testutil.DropSchema(t, pool, s)
		}
	})
	return prefix
}

func TestMigrateTenantSchemas(t *testing.T) {
	t.Parallel()
	prefix := tenantPrefix(t)
	pool := testutil.Pool(t)
	evil := prefix + `x"; drop table y; --`
	for _, s := range []string{prefix + "a", prefix + "b", evil} {
		_, err := pool.Exec(context.Background(), `CREATE SCHEMA `+pgx.Identifier{s}.Sanitize())
		require.NoError(t, err)
	}
	latest := pgdriver.Migrations()[len(pgdriver.Migrations())-1].Version
	db := []string{"--database-url", testutil.DatabaseURL()}

	res := run(t, nil, append(db, "migrate", "--tenant-schemas", prefix+"*")...)
	requireOK(t, res)
	lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
	require.Len(t, lines, 4, res.stdout)
	for i, s := range []string{prefix + "a", prefix + "b", evil} {
		require.True(t, strings.HasPrefix(lines[i], fmt.Sprintf("%q: applied 001_create_outbox_events, ", s)), lines[i])
		require.True(t, strings.HasSuffix(lines[i], fmt.Sprintf("; now at version %d", latest)), lines[i])
	}
	require.Equal(t, "3 tenant schemas, 0 failed", lines[3])

	// Idempotent.
	res = run(t, nil, append(db, "migrate", "--tenant-schemas", prefix+"*")...)
	requireOK(t, res)
	require.Equal(t, fmt.Sprintf("%q: up to date at version %d\n%q: up to date at version %d\n%q: up to date at version %d\n3 tenant schemas, 0 failed\n",
		prefix+"a", latest, prefix+"b", latest, evil, latest), res.stdout)

	// The query form, with a schema that does not exist yet: created.
	res = run(t, nil, append(db, "migrate", "--tenant-query", fmt.Sprintf("SELECT %s UNION ALL SELECT %s",
		quoteLiteral(prefix+"a"), quoteLiteral(prefix+"new")))...)
	requireOK(t, res)
	require.Contains(t, res.stdout, fmt.Sprintf("%q: up to date at version %d\n", prefix+"a", latest))
	require.Contains(t, res.stdout, fmt.Sprintf("%q: applied 001_create_outbox_events", prefix+"new"))
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM `+testutil.Table(evil)).Scan(&n))

	requireFail(t, run(t, nil, append(db, "migrate", "--tenant-schemas", prefix+"*", "--schema", "app")...), 2, "leave --schema out")
	requireFail(t, run(t, nil, append(db, "migrate", "--tenant-schemas", prefix+"nomatch*")...), 1, "no schema matches")
	requireFail(t, run(t, nil, "--database-url", "sqlite://"+t.TempDir()+"/x.db", "migrate", "--tenant-schemas", "s_*"), 2, "a SQLite file holds one outbox")
	requireFail(t, run(t, nil, "--database-url", "sqlite://"+t.TempDir()+"/x.db", "relay", "--sink", "stdout:", "--tenant-schemas", "s_*"), 2, "a SQLite file holds one outbox")
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// tenantServer is a webhook endpoint that counts deliveries per
// (tenant, id) from ce-tenant and webhook-free ce-id, and can be slowed.
type tenantServer struct {
	*httptest.Server
	mu    sync.Mutex
	acked map[string]int // ce-id (qualified) → deliveries
}

func newTenantServer(t *testing.T, delay time.Duration) *tenantServer {
	s := &tenantServer{acked: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id, err := url.PathUnescape(r.Header.Get("ce-id"))
		tenant := r.Header.Get("ce-tenant")
		if err != nil || tenant == "" || !strings.HasPrefix(id, tenant+":") && !strings.Contains(id, ":"+tenant+":") {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		s.mu.Lock()
		s.acked[id]++
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *tenantServer) ids() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.acked))
	for k, v := range s.acked {
		out[k] = v
	}
	return out
}

// Two relay processes serve 20 tenants; one is SIGKILLed mid-flight and
// replaced, twice: every event of every tenant is delivered, none lost.
func TestRelayTenantsSIGKILLLosesNothing(t *testing.T) {
	t.Parallel()
	prefix := tenantPrefix(t)
	pool := testutil.Pool(t)
	ctx := context.Background()
	const tenants, perTenant = 20, 60
	var schemas []string
	for i := range tenants {
		s := prefix + strconv.Itoa(i)
		_, err := pgdriver.Migrate(ctx, pool, s)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO `+testutil.Table(s)+` (event_type, payload)
SELECT 'thing.happened', jsonb_build_object('i', g) FROM generate_series(1, $1) g`, perTenant)
		require.NoError(t, err)
		schemas = append(schemas, s)
	}
	srv := newTenantServer(t, 5*time.Millisecond)
	relay := func(id string) *process {
		return start(t, nil, "--database-url", testutil.DatabaseURL(), "relay", "--tenant-schemas", prefix+"*",
			"--sink", srv.URL, "--relay-id", id, "--batch-size", "10", "--lease", "3s", "--sink-timeout", "2s",
			"--tenant-refresh", "500ms", "--log-level", "warn")
	}
	processed := func() int {
		total := 0
		for _, s := range schemas {
			var n int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+testutil.Table(s)+` WHERE status = 'processed'`).Scan(&n))
			total += n
		}
		return total
	}
	keep := relay("keeper")
	doomed := relay("doomed-1")
	for round, threshold := range []int{tenants * perTenant / 4, tenants * perTenant / 2} {
		testutil.WaitFor(t, 60*time.Second, "progress before the kill", func() bool { return processed() >= threshold })
		require.NoError(t, doomed.cmd.Process.Signal(syscall.SIGKILL))
		<-doomed.done
		doomed = relay(fmt.Sprintf("doomed-%d", round+2))
	}
	testutil.WaitFor(t, 60*time.Second, "every tenant's events processed", func() bool {
		require.False(t, keep.exited(), "relay exited; stderr:\n%s", keep.stderr.String())
		return processed() == tenants*perTenant
	})
	acked := srv.ids()
	for _, s := range schemas {
		for id := 1; id <= perTenant; id++ {
			require.GreaterOrEqual(t, acked[s+":"+strconv.Itoa(id)], 1, "event %d of %s never delivered", id, s)
		}
	}
	require.Len(t, acked, tenants*perTenant, "no ghost events, and no tenant's id taken for another's")
	require.Equal(t, 0, keep.stop(t, syscall.SIGTERM), keep.stderr.String())
	require.Equal(t, 0, doomed.stop(t, syscall.SIGTERM), doomed.stderr.String())
}

// One relay process serves the tenants of two databases; the second is
// reached through a proxy that refuses every connection for 15 seconds:
// the first database's tenants keep flowing, and the second's catch up.
func TestRelayTenantsTwoDatabasesOneCut(t *testing.T) {
	t.Parallel()
	prefix := tenantPrefix(t)
	ctx := context.Background()
	admin := testutil.Pool(t)
	dbName := strings.TrimSuffix(prefix, "_") + "_db2"
	_, err := admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{dbName}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), `DROP DATABASE `+pgx.Identifier{dbName}.Sanitize()+` WITH (FORCE)`)
		require.NoError(t, err)
	})
	u, err := url.Parse(testutil.DatabaseURL())
	require.NoError(t, err)
	direct := *u
	direct.Path = "/" + dbName
	second, err := pgx.Connect(ctx, direct.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = second.Close(context.Background()) })
	proxy := tcpproxy.Start(t, u.Host)
	proxied := direct
	proxied.Host = proxy.Addr()

	tenantA := prefix + "a"
	_, err = pgdriver.Migrate(ctx, admin, tenantA)
	require.NoError(t, err)
	secondPool, err := pgxpool.New(ctx, direct.String())
	require.NoError(t, err)
	t.Cleanup(secondPool.Close)
	tenantB := prefix + "b"
	_, err = pgdriver.Migrate(ctx, secondPool, tenantB)
	require.NoError(t, err)

	insert := func(q interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}, schema string, n int) {
		_, err := q.Exec(ctx, `INSERT INTO `+testutil.Table(schema)+` (event_type, payload)
SELECT 'thing.happened', jsonb_build_object('i', g) FROM generate_series(1, $1) g`, n)
		require.NoError(t, err)
	}
	processed := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}, schema string) int {
		var n int
		require.NoError(t, q.QueryRow(ctx, `SELECT count(*) FROM `+testutil.Table(schema)+` WHERE status = 'processed'`).Scan(&n))
		return n
	}
	srv := newTenantServer(t, 0)
	metricsAddr := freeAddr(t)
	relay := start(t, nil, "--database-url", testutil.DatabaseURL(), "--database-url", proxied.String(), "relay",
		"--tenant-schemas", prefix+"*", "--sink", srv.URL, "--db-timeout", "2s", "--lease", "5s", "--log-level", "warn",
		"--metrics-addr", metricsAddr)
	// /readyz reports each database; one that is down leaves the relay
	// ready, since it serves the other's tenants.
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + metricsAddr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	labelFirst := "database 127.0.0.1:" + u.Port() + "/" + strings.TrimPrefix(u.Path, "/")
	labelCut := "database " + proxy.Addr() + "/" + dbName

	insert(admin, tenantA, 5)
	insert(secondPool, tenantB, 5)
	testutil.WaitFor(t, 20*time.Second, "both databases flowing", func() bool {
		return processed(admin, tenantA) == 5 && processed(secondPool, tenantB) == 5
	})
	testutil.WaitFor(t, 10*time.Second, "both databases ready", func() bool {
		code, body := readyz()
		return code == http.StatusOK && strings.Contains(body, labelFirst+": ok\n") && strings.Contains(body, labelCut+": ok\n")
	})

	proxy.Refuse()
	cutAt := time.Now()
	insert(admin, tenantA, 5)
	insert(secondPool, tenantB, 5)
	testutil.WaitFor(t, 10*time.Second, "the first database flowing while the second is cut", func() bool {
		return processed(admin, tenantA) == 10
	})
	require.Equal(t, 5, processed(secondPool, tenantB), "the cut database's events cannot have been published")
	testutil.WaitFor(t, 10*time.Second, "the cut database reported, the relay still ready", func() bool {
		code, body := readyz()
		return code == http.StatusOK && strings.Contains(body, labelFirst+": ok\n") &&
			strings.Contains(body, labelCut+": ") && !strings.Contains(body, labelCut+": ok") && strings.Contains(body, "(its tenants wait")
	})
	insert(admin, tenantA, 5)
	testutil.WaitFor(t, 10*time.Second, "still flowing", func() bool { return processed(admin, tenantA) == 15 })
	for time.Since(cutAt) < 15*time.Second {
		require.False(t, relay.exited(), "relay exited; stderr:\n%s", relay.stderr.String())
		time.Sleep(100 * time.Millisecond) // the cut lasts 15s of wall time
	}
	proxy.Allow()
	testutil.WaitFor(t, 60*time.Second, "the second database catching up", func() bool {
		return processed(secondPool, tenantB) == 10
	})

	// Both databases number their events from 1: the ids are qualified by
	// the database too, and every event arrived.
	acked := srv.ids()
	require.Len(t, acked, 25, "every event once at least, none taken for another")
	labelA := "127.0.0.1%3A" + u.Port() + "/" + strings.TrimPrefix(u.Path, "/")
	require.Contains(t, acked, labelA+":"+tenantA+":1")
	require.Equal(t, 0, relay.stop(t, syscall.SIGTERM), relay.stderr.String())
	require.Contains(t, relay.stderr.String(), "database="+proxy.Addr()+"/"+dbName, "the cut was logged, naming the database without credentials")
}

func TestStatsPerTenantMatchesSQL(t *testing.T) {
	t.Parallel()
	prefix := tenantPrefix(t)
	pool := testutil.Pool(t)
	ctx := context.Background()
	for i, s := range []string{prefix + "a", prefix + "b", prefix + `x"; --`} {
		_, err := pgdriver.Migrate(ctx, pool, s)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO `+testutil.Table(s)+` (event_type, payload, status, created_at, available_at)
SELECT 'x', '{}', (ARRAY['pending','processing','processed','failed'])[1 + g % 4], now() - interval '1 minute' * $2, now() - interval '1 minute' * $2
FROM generate_series(1, $1) g`, 10*(i+1), i)
		require.NoError(t, err)
	}
	res := run(t, nil, "--database-url", testutil.DatabaseURL(), "stats", "--tenant-schemas", prefix+"*", "--json")
	requireOK(t, res)
	var doc struct {
		Tenants []struct {
			Schema                                 string
			Pending, Processing, Processed, Failed int64
			OldestPendingAgeSeconds                float64 `json:"oldest_pending_age_seconds"`
		}
		Pending, Processing, Processed, Failed int64
		OldestPendingAgeSeconds                float64 `json:"oldest_pending_age_seconds"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
	require.Len(t, doc.Tenants, 3)
	var total [4]int64
	for i, tn := range doc.Tenants {
		var want [4]int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'processing'),
count(*) FILTER (WHERE status = 'processed'), count(*) FILTER (WHERE status = 'failed') FROM `+testutil.Table(tn.Schema)).Scan(&want[0], &want[1], &want[2], &want[3]))
		require.Equal(t, want, [4]int64{tn.Pending, tn.Processing, tn.Processed, tn.Failed}, tn.Schema)
		for k := range total {
			total[k] += want[k]
		}
		if i > 0 {
			require.LessOrEqual(t, tn.OldestPendingAgeSeconds, doc.Tenants[i-1].OldestPendingAgeSeconds, "sorted by lag")
		}
	}
	require.Equal(t, prefix+`x"; --`, doc.Tenants[0].Schema, "the most lagging first")
	require.InDelta(t, 120, doc.Tenants[0].OldestPendingAgeSeconds, 10)
	require.Equal(t, total, [4]int64{doc.Pending, doc.Processing, doc.Processed, doc.Failed})
	require.Equal(t, doc.Tenants[0].OldestPendingAgeSeconds, doc.OldestPendingAgeSeconds)

	res = run(t, nil, "--database-url", testutil.DatabaseURL(), "stats", "--tenant-schemas", prefix+"*")
	requireOK(t, res)
	require.Contains(t, res.stdout, "total (3 tenants)")
	require.Contains(t, res.stdout, prefix+"a")
}

// A tenant relay serves metrics labelled by schema and database (never
// credentials), per tenant or aggregated, and its alerts name the tenant.
func TestRelayTenantsMetricsAndAlerts(t *testing.T) {
	t.Parallel()
	prefix := tenantPrefix(t)
	pool := testutil.Pool(t)
	ctx := context.Background()
	acme, globex := prefix+"acme", prefix+"globex"
	for _, s := range []string{acme, globex} {
		_, err := pgdriver.Migrate(ctx, pool, s)
		require.NoError(t, err)
	}
	// write gives acme 3 events and globex 2 and one the sink rejects.
	write := func() {
		for s, n := range map[string]int{acme: 3, globex: 2} {
			_, err := pool.Exec(ctx, `INSERT INTO `+testutil.Table(s)+` (event_type, payload)
SELECT 'thing.happened', jsonb_build_object('i', g) FROM generate_series(1, $1) g`, n)
			require.NoError(t, err)
		}
		_, err := pool.Exec(ctx, `INSERT INTO `+testutil.Table(globex)+` (event_type, payload) VALUES ('thing.rejected', '{}')`)
		require.NoError(t, err)
	}
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("ce-type") == "thing.rejected" {
			w.WriteHeader(http.StatusUnprocessableEntity) // permanent: dead-lettered at once
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(sink.Close)
	alerts := newObsAlertServer(t)
	const dbPassword = "TenantMetricsPassw0rd"
	dbURL := withPassword(t, dbPassword)
	pc, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	database := fmt.Sprintf("%s:%d/%s", pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database)

	for _, mode := range []string{"per-tenant", "aggregate"} {
		write()
		p := start(t, nil, "--database-url", dbURL, "--log-format", "json", "relay", "--tenant-schemas", prefix+"*",
			"--sink", sink.URL, "--metrics-addr", "127.0.0.1:0", "--tenant-metrics", mode, "--alert-webhook", alerts.URL,
			"--tenant-refresh", "200ms")
		metrics := "http://" + obsLogValue(t, p, "serving metrics", "addr") + "/metrics"
		series := func(name, schema string) string {
			return fmt.Sprintf(`%s{database=%q,schema=%q,sink="webhook"}`, name, database, schema)
		}
		want := map[string]string{
			series("outbox_published_total", "*"): "5", series("outbox_dead_lettered_total", "*"): "1",
			series("outbox_relay_up", "*"): "1",
		}
		if mode == "per-tenant" {
			want = map[string]string{
				series("outbox_published_total", acme): "3", series("outbox_published_total", globex): "2",
				series("outbox_dead_lettered_total", globex): "1", series("outbox_dead_lettered_total", acme): "0",
				series("outbox_relay_up", acme): "1",
				fmt.Sprintf(`outbox_events{database=%q,schema=%q,status="failed"}`, database, globex): "1",
			}
		}
		var body string
		testutil.WaitFor(t, 30*time.Second, mode+" metrics of every tenant", func() bool {
			require.False(t, p.exited(), "relay exited early; stderr:\n%s", p.stderr.String())
			code, text := obsGet(t, metrics)
			require.Equal(t, http.StatusOK, code)
			body = text
			for s, v := range want {
				if !obsHasSeries(body, s, v) {
					return false
				}
			}
			return true
		})
		require.NotContains(t, body, dbPassword)
		if mode == "aggregate" {
			require.NotContains(t, body, acme, "no per-tenant series in aggregate mode")
		}
		require.Equal(t, 0, p.stop(t, syscall.SIGTERM), "stderr:\n%s", p.stderr.String())
		require.NotContains(t, p.stderr.String(), dbPassword)
	}
	// The dead letter's alert names its tenant (once per run).
	testutil.WaitFor(t, 30*time.Second, "the alerts", func() bool {
		a, _ := alerts.snapshot()
		return len(a) == 2
	})
	got, _ := alerts.snapshot()
	require.Equal(t, globex, got[0]["schema"])
	require.Contains(t, got[0]["text"], "dead-lettered in tenant "+globex)
	require.Equal(t, globex, got[0]["events"].([]any)[0].(map[string]any)["tenant"])

	requireFail(t, run(t, nil, "--database-url", testutil.DatabaseURL(), "relay", "--tenant-schemas", prefix+"*", "--sink", "stdout:",
		"--tenant-metrics", "per-schema"), 2, `invalid --tenant-metrics "per-schema": use per-tenant or aggregate`)
}

// events retry --status failed --tenant-schemas retries every tenant's
// dead letters (filters apply per tenant), reporting per tenant and in
// total; --dry-run changes nothing.
func TestEventsRetryTenantSchemas(t *testing.T) {
	t.Parallel()
	prefix := tenantPrefix(t)
	pool := testutil.Pool(t)
	ctx := context.Background()
	acme, globex := prefix+"acme", prefix+"globex"
	for s, n := range map[string]int{acme: 3, globex: 2} {
		_, err := pgdriver.Migrate(ctx, pool, s)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO `+testutil.Table(s)+` (event_type, payload, status, attempts, last_error)
SELECT CASE WHEN g = 1 THEN 'other.type' ELSE 'thing.happened' END, '{}', 'failed', 5, 'HTTP 500' FROM generate_series(1, $1) g`, n)
		require.NoError(t, err)
	}
	failed := func(s string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+testutil.Table(s)+` WHERE status = 'failed'`).Scan(&n))
		return n
	}
	db := []string{"--database-url", testutil.DatabaseURL(), "events", "retry", "--status", "failed", "--tenant-schemas", prefix + "*"}

	res := run(t, nil, append(db, "--dry-run")...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, fmt.Sprintf("%q: would retry 3 failed events\n%q: would retry 2 failed events\nwould retry 5 failed events in 2 tenant schemas (dry run: nothing changed)\n", acme, globex), res.stdout)
	require.Equal(t, 3, failed(acme))

	res = run(t, nil, append(db, "--type", "thing.happened")...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, fmt.Sprintf("%q: retried 2 failed events\n%q: retried 1 failed events\nretried 3 failed events in 2 tenant schemas\n", acme, globex), res.stdout)
	require.Equal(t, 1, failed(acme))
	require.Equal(t, 1, failed(globex))

	res = run(t, nil, db...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "retried 2 failed events in 2 tenant schemas\n")
	require.Zero(t, failed(acme)+failed(globex))

	requireFail(t, run(t, nil, "--database-url", testutil.DatabaseURL(), "events", "retry", "7", "--tenant-schemas", prefix+"*"), 2, "event IDs repeat across tenants")
	requireFail(t, run(t, nil, append(db[:len(db)-1], prefix+"nomatch*")...), 1, "no tenant schema with an outbox matches")
}

// stats --watch --tenant-schemas redraws the per-tenant counts: a block
// per refresh, or a JSON line, and sees a tenant created meanwhile.
func TestStatsWatchTenants(t *testing.T) {
	t.Parallel()
	prefix := tenantPrefix(t)
	pool := testutil.Pool(t)
	ctx := context.Background()
	acme, globex := prefix+"acme", prefix+"globex"
	_, err := pgdriver.Migrate(ctx, pool, acme)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO `+testutil.Table(acme)+` (event_type, payload) SELECT 'x', '{}' FROM generate_series(1, 3)`)
	require.NoError(t, err)

	p := start(t, nil, "--database-url", testutil.DatabaseURL(), "stats", "--tenant-schemas", prefix+"*", "--watch", "--json", "--interval", "100ms")
	testutil.WaitFor(t, 20*time.Second, "a first line", func() bool { return strings.Count(p.stdout.String(), "\n") >= 1 })
	_, err = pgdriver.Migrate(ctx, pool, globex)
	require.NoError(t, err)
	testutil.WaitFor(t, 20*time.Second, "the new tenant counted", func() bool {
		return strings.Contains(p.stdout.String(), `"schema":"`+globex+`"`)
	})
	require.Equal(t, 0, p.stop(t, syscall.SIGINT), p.stderr.String())
	lines := strings.Split(strings.TrimSuffix(p.stdout.String(), "\n"), "\n")
	var doc struct {
		At      time.Time `json:"at"`
		Pending int       `json:"pending"`
		Tenants []struct {
			Schema  string `json:"schema"`
			Pending int    `json:"pending"`
		} `json:"tenants"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &doc), lines[0])
	require.False(t, doc.At.IsZero())
	require.Equal(t, 3, doc.Pending)
	require.Len(t, doc.Tenants, 1)
	require.Equal(t, acme, doc.Tenants[0].Schema)
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &doc))
	require.Len(t, doc.Tenants, 2)

	p = start(t, nil, "--database-url", testutil.DatabaseURL(), "stats", "--tenant-schemas", prefix+"*", "--watch", "--interval", "100ms")
	testutil.WaitFor(t, 20*time.Second, "two blocks", func() bool { return strings.Count(p.stdout.String(), "total (2 tenants)") >= 2 })
	require.Equal(t, 0, p.stop(t, syscall.SIGINT), p.stderr.String())
	require.Contains(t, p.stdout.String(), "# ")
	require.Contains(t, p.stdout.String(), acme)
}

// events list --tenant-schemas lists every tenant's newest --limit
// events, each row naming its schema; --json carries a schema field;
// --before-id pages one tenant only.
func TestEventsListTenantSchemas(t *testing.T) {
	t.Parallel()
	prefix := tenantPrefix(t)
	pool := testutil.Pool(t)
	ctx := context.Background()
	acme, globex := prefix+"acme", prefix+"globex"
	for s, n := range map[string]int{acme: 3, globex: 2} {
		_, err := pgdriver.Migrate(ctx, pool, s)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO `+testutil.Table(s)+` (event_type, payload, status)
SELECT 'thing.'||g, '{}', CASE WHEN g = 1 THEN 'failed' ELSE 'pending' END FROM generate_series(1, $1) g`, n)
		require.NoError(t, err)
	}
	db := []string{"--database-url", testutil.DatabaseURL(), "events", "list", "--tenant-schemas", prefix + "*"}

	res := run(t, nil, append(db, "--limit", "2", "--json")...)
	require.Equal(t, 0, res.code, res.stderr)
	var docs []struct {
		Schema    string `json:"schema"`
		ID        int64  `json:"id"`
		EventType string `json:"event_type"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &docs), res.stdout)
	type row struct {
		schema string
		id     int64
		typ    string
	}
	var got []row
	for _, d := range docs {
		got = append(got, row{d.Schema, d.ID, d.EventType})
	}
	require.Equal(t, []row{{acme, 3, "thing.3"}, {acme, 2, "thing.2"}, {globex, 2, "thing.2"}, {globex, 1, "thing.1"}}, got)

	res = run(t, nil, append(db, "--status", "failed")...)
	require.Equal(t, 0, res.code, res.stderr)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	require.Len(t, lines, 3, res.stdout)
	require.Regexp(t, `^SCHEMA\s+ID\s+STATUS`, lines[0])
	require.Regexp(t, `^`+acme+`\s+1\s+failed\s+thing\.1`, lines[1])
	require.Regexp(t, `^`+globex+`\s+1\s+failed\s+thing\.1`, lines[2])

	res = run(t, nil, append(db, "--status", "processed", "--json")...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, "[]\n", res.stdout)

	requireFail(t, run(t, nil, append(db, "--before-id", "2")...), 2, "--before-id pages one tenant")
	requireFail(t, run(t, nil, append(db, "--tenant-query", "SELECT 1")...), 2, "discover tenants one way")
	requireFail(t, run(t, nil, append(db[:len(db)-1], prefix+"nomatch*")...), 1, "no tenant schema with an outbox matches")
}

// purge --tenant-schemas purges every tenant, one line per tenant and a
// total, and leaves newer and unfinished events alone.
func TestPurgeTenantSchemas(t *testing.T) {
	t.Parallel()
	prefix := tenantPrefix(t)
	pool := testutil.Pool(t)
	ctx := context.Background()
	acme, globex := prefix+"acme", prefix+"globex"
	for s, n := range map[string]int{acme: 3, globex: 2} {
		_, err := pgdriver.Migrate(ctx, pool, s)
		require.NoError(t, err)
		// n old processed events, one new processed and one old pending.
		_, err = pool.Exec(ctx, `INSERT INTO `+testutil.Table(s)+` (event_type, payload, status, processed_at)
SELECT 'old', '{}'::jsonb, 'processed', now() - interval '8 days' FROM generate_series(1, $1)
UNION ALL SELECT 'new', '{}', 'processed', now()
UNION ALL SELECT 'pending', '{}', 'pending', NULL`, n)
		require.NoError(t, err)
	}
	count := func(s string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+testutil.Table(s)).Scan(&n))
		return n
	}
	db := []string{"--database-url", testutil.DatabaseURL(), "purge", "--older-than", "7d", "--tenant-schemas", prefix + "*"}
	res := run(t, nil, db...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, fmt.Sprintf("%q: purged 3 processed events older than 7d\n%q: purged 2 processed events older than 7d\npurged 5 processed events older than 7d in 2 tenant schemas\n", acme, globex), res.stdout)
	require.Equal(t, 2, count(acme))
	require.Equal(t, 2, count(globex))

	res = run(t, nil, db...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "purged 0 processed events older than 7d in 2 tenant schemas\n")

	requireFail(t, run(t, nil, append(db, "--schema", "x")...), 2, "each tenant's schema is its own")
	requireFail(t, run(t, nil, append(db[:len(db)-1], prefix+"nomatch*")...), 1, "no tenant schema with an outbox matches")
}
