package outbox_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

// tenantBundle is a set of tenant schemas sharing a unique prefix, so that
// a glob of the prefix finds the test's tenants and no other test's.
type tenantBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	prefix string
}

func setupTenants(t *testing.T) tenantBundle {
	t.Helper()
	// Short, so that a tenant name fits PostgreSQL's 63-byte identifiers:
	// tn_<the unique suffix of the test's schema name>_.
	name := testutil.SchemaName(t)
	return tenantBundle{ctx: context.Background(), pool: testutil.Pool(t), prefix: "tn_" + name[len(name)-8:] + "_"}
}

// tenant creates and migrates the tenant schema prefix+name, dropped when
// the test ends, and returns its name.
func (b tenantBundle) tenant(t testing.TB, name string) string {
	t.Helper()
	schema := b.prefix + name
	t.Cleanup(func() { testutil.DropSchema(t, b.pool, schema) })
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	_, err := pgdriver.Migrate(ctx, b.pool, schema)
	require.NoError(t, err)
	return schema
}

// insert writes n events into schema's outbox with plain SQL, as a writer
// in any language does.
func (b tenantBundle) insert(t *testing.T, schema string, n int) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `INSERT INTO `+testutil.Table(schema)+` (event_type, aggregate_type, aggregate_id, payload)
SELECT 'thing.happened', 'thing', g::text, jsonb_build_object('i', g) FROM generate_series(1, $1) g`, n)
	require.NoError(t, err)
}

// start runs Tenants until the test ends.
func (b tenantBundle) start(t *testing.T, cfg outbox.TenantsConfig) *outbox.Tenants {
	t.Helper()
	if cfg.Schemas == "" && cfg.Query == "" {
		cfg.Schemas = b.prefix + "*"
	}
	if cfg.Relay.Logger == nil {
		cfg.Relay.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg.Refresh = cmpOr(cfg.Refresh, 100*time.Millisecond)
	cfg.ScanInterval = cmpOr(cfg.ScanInterval, 20*time.Millisecond)
	ts, err := outbox.NewTenants(outbox.Postgres(b.pool), cfg)
	require.NoError(t, err)
	require.NoError(t, ts.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, ts.Stop(ctx))
	})
	return ts
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func TestTenantsServeEachSchemaWithItsTenant(t *testing.T) {
	t.Parallel()
	b := setupTenants(t)
	acme, globex := b.tenant(t, "acme"), b.tenant(t, "globex")
	// A name shaped like an injection is a tenant like any other: quoted
	// everywhere, never executed.
	evil := b.tenant(t, `x"; drop table y; --`)
	other := testutil.EmptySchemaName(t) // a schema outside the glob
	_, err := pgdriver.Migrate(b.ctx, b.pool, other)
	require.NoError(t, err)
	for _, s := range []string{acme, globex, evil, other} {
		b.insert(t, s, 2) // ids 1 and 2 in every schema
	}

	rec := outboxtest.NewRecorder()
	ts := b.start(t, outbox.TenantsConfig{Relay: outbox.RelayConfig{Sink: rec}})
	require.Equal(t, []string{acme, globex, evil}, ts.Schemas())
	rec.WaitLen(t, 6, 10*time.Second)

	ids := map[string]string{}
	for _, e := range rec.Events() {
		require.Contains(t, []string{acme, globex, evil}, e.Tenant)
		prev, dup := ids[e.UniqueID()]
		require.False(t, dup, "unique id %q of %s already seen for %s", e.UniqueID(), e.Tenant, prev)
		ids[e.UniqueID()] = e.Tenant
		require.Empty(t, e.Database)
	}
	require.Len(t, ids, 6)
	// The schema outside the glob kept its events.
	var pending int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+testutil.Table(other)+` WHERE status = 'pending'`).Scan(&pending))
	require.Equal(t, 2, pending)
	for _, s := range []string{acme, globex, evil} {
		testutil.WaitFor(t, 10*time.Second, "marked processed in "+s, func() bool {
			var processed int
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+testutil.Table(s)+` WHERE status = 'processed'`).Scan(&processed))
			return processed == 2
		})
	}
}

func TestTenantsDiscoverNewTenantsAndDropRemovedOnes(t *testing.T) {
	t.Parallel()
	b := setupTenants(t)
	meta := b.tenant(t, "meta")
	_, err := b.pool.Exec(b.ctx, `CREATE TABLE `+pgx.Identifier{meta, "tenants"}.Sanitize()+` (schema_name text PRIMARY KEY, active boolean NOT NULL)`)
	require.NoError(t, err)
	setActive := func(schema string, active bool) {
		_, err := b.pool.Exec(b.ctx, `INSERT INTO `+pgx.Identifier{meta, "tenants"}.Sanitize()+` VALUES ($1, $2)
ON CONFLICT (schema_name) DO UPDATE SET active = EXCLUDED.active`, schema, active)
		require.NoError(t, err)
	}
	first := b.tenant(t, "first")
	setActive(first, true)
	// Named by the query but not migrated yet: skipped until it is.
	late := b.prefix + "late"
	t.Cleanup(func() { testutil.DropSchema(t, b.pool, late) })
	setActive(late, true)

	rec := outboxtest.NewRecorder()
	ts := b.start(t, outbox.TenantsConfig{
		Relay: outbox.RelayConfig{Sink: rec},
		Query: `SELECT schema_name FROM ` + pgx.Identifier{meta, "tenants"}.Sanitize() + ` WHERE active ORDER BY 1`,
	})
	require.Equal(t, []string{first}, ts.Schemas())

	// Created and migrated while the relay runs: served within a refresh.
	b.insert(t, first, 1)
	_, err = pgdriver.Migrate(b.ctx, b.pool, late)
	require.NoError(t, err)
	b.insert(t, late, 1)
	testutil.WaitFor(t, 10*time.Second, "the new tenant served", func() bool { return len(ts.Schemas()) == 2 })
	rec.WaitLen(t, 2, 10*time.Second)
	tenants := map[string]bool{}
	for _, e := range rec.Events() {
		tenants[e.Tenant] = true
	}
	require.Equal(t, map[string]bool{first: true, late: true}, tenants)

	// Deactivated: dropped at the next refresh, and its events stay.
	setActive(first, false)
	testutil.WaitFor(t, 10*time.Second, "the removed tenant dropped", func() bool {
		s := ts.Schemas()
		return len(s) == 1 && s[0] == late
	})
	b.insert(t, first, 1)
	b.insert(t, late, 1)
	rec.WaitLen(t, 3, 10*time.Second)
	var pending int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+testutil.Table(first)+` WHERE status = 'pending'`).Scan(&pending))
	require.Equal(t, 1, pending, "a removed tenant's events are not published")
}

// floodSink takes a while per batch of the flooding tenant, as a real
// broker does, and records when each quiet tenant's event arrived.
type floodSink struct {
	flood string
	delay time.Duration
	mu    sync.Mutex
	quiet map[int64]time.Time
	n     int
}

func (s *floodSink) Publish(ctx context.Context, events []outbox.Event) []error {
	if events[0].Tenant == s.flood {
		time.Sleep(s.delay) // the broker's round trip, not a wait for async work
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range events {
		if e.Tenant == s.flood {
			s.n++
		} else {
			s.quiet[e.ID] = time.Now()
		}
	}
	return nil
}

func (s *floodSink) flooded() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *floodSink) arrived(id int64) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.quiet[id]
	return at, ok
}

// A tenant with a backlog does not hold back another's events by more
// than about one batch cycle.
func TestTenantsFloodingTenantDoesNotDelayAQuietOne(t *testing.T) {
	t.Parallel()
	b := setupTenants(t)
	flood, quiet := b.tenant(t, "flood"), b.tenant(t, "quiet")
	const backlog = 50_000
	b.insert(t, flood, backlog)
	sink := &floodSink{flood: flood, delay: 20 * time.Millisecond, quiet: map[int64]time.Time{}}
	b.start(t, outbox.TenantsConfig{
		Relay:        outbox.RelayConfig{Sink: sink, BatchSize: 500, Workers: 2},
		ScanInterval: 100 * time.Millisecond,
	})
	testutil.WaitFor(t, 10*time.Second, "the flood draining", func() bool { return sink.flooded() > 0 })

	var worst time.Duration
	for i := range 10 {
		var id int64
		var written time.Time
		require.NoError(t, b.pool.QueryRow(b.ctx, `INSERT INTO `+testutil.Table(quiet)+` (event_type, payload)
VALUES ('ping', '{}') RETURNING id, clock_timestamp()`).Scan(&id, &written))
		testutil.WaitFor(t, 10*time.Second, "the quiet tenant's event", func() bool { _, ok := sink.arrived(id); return ok })
		at, _ := sink.arrived(id)
		worst = max(worst, at.Sub(written))
		require.Less(t, sink.flooded(), backlog, "round %d: the flood ended before the quiet tenant was measured", i)
	}
	t.Logf("quiet tenant's worst commit-to-sink latency during the flood: %v", worst)
	// One scan interval plus a claim and a publish; far below the flood's
	// drain time (100 batches of 20ms at least).
	require.Less(t, worst, time.Second)
}

func TestTenantsConfigErrors(t *testing.T) {
	t.Parallel()
	db := outbox.Postgres(testutil.Pool(t))
	sink := outboxtest.NewRecorder()
	for _, tc := range []struct {
		cfg  outbox.TenantsConfig
		want string
	}{
		{outbox.TenantsConfig{Relay: outbox.RelayConfig{Sink: sink}}, "invalid Schemas: and Query are both empty"},
		{outbox.TenantsConfig{Relay: outbox.RelayConfig{Sink: sink}, Schemas: "s_*", Query: "SELECT 1"}, "invalid Query: is set with Schemas"},
		{outbox.TenantsConfig{Relay: outbox.RelayConfig{Sink: sink, Schema: "app"}, Schemas: "s_*"}, "invalid Relay.Schema"},
		{outbox.TenantsConfig{Relay: outbox.RelayConfig{}, Schemas: "s_*"}, "invalid Sink"},
		{outbox.TenantsConfig{Relay: outbox.RelayConfig{Sink: sink}, Schemas: "s_\x00"}, "NUL"},
	} {
		_, err := outbox.NewTenants(db, tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
	// A query that fails fails Start, in one line that says so.
	ts, err := outbox.NewTenants(db, outbox.TenantsConfig{Relay: outbox.RelayConfig{Sink: sink}, Query: "SELECT nope FROM nowhere"})
	require.NoError(t, err)
	err = ts.Start(context.Background())
	require.ErrorContains(t, err, "outbox: tenants: discover: tenant query:")
	require.NotContains(t, err.Error(), "\n")
	// A query that writes is refused: it runs read-only.
	ts, err = outbox.NewTenants(db, outbox.TenantsConfig{Relay: outbox.RelayConfig{Sink: sink}, Query: "CREATE TABLE written_by_discovery ()"})
	require.NoError(t, err)
	require.ErrorContains(t, ts.Start(context.Background()), "read-only")
}

func TestMatchGlob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"s_*", "s_acme", true}, {"s_*", "s_", true}, {"s_*", "t_acme", false},
		{"s_?", "s_a", true}, {"s_?", "s_ab", false}, {"*", "", true}, {"", "", true}, {"", "a", false},
		{"a*b*c", "axxbyyc", true}, {"a*b*c", "axxbyy", false}, {"*_x", "a_b_x", true},
		{"s_[a]", "s_a", false}, {"s_[a]", "s_[a]", true}, {"é*", "éa", true}, {"?", "é", true},
		{"s.*", "sx", false},
	} {
		require.Equal(t, tc.want, outbox.MatchGlob(tc.pattern, tc.name), "%q ~ %q", tc.pattern, tc.name)
	}
}

// The relay's role needs USAGE and table rights on the tenant schemas
// only, as docs/tenants.md lists them; a tenant it was not granted is not
// served.
func TestTenantsLeastPrivilegeRole(t *testing.T) {
	t.Parallel()
	forEachLeases(t, testTenantsLeastPrivilegeRole)
}

// testTenantsLeastPrivilegeRole grants what docs/tenants.md lists, for
// relays on owned partitions (LeasesPartitions) the partition tables and
// outbox_migrations too.
func testTenantsLeastPrivilegeRole(t *testing.T, leases outbox.Leases) {
	b := setupTenants(t)
	granted, other := b.tenant(t, "granted"), b.tenant(t, "other")
	role := strings.TrimSuffix(b.prefix, "_") + "_relay"
	r, s := pgx.Identifier{role}.Sanitize(), func(table string) string { return pgx.Identifier{granted, table}.Sanitize() }
	grants := []string{
		`GRANT USAGE ON SCHEMA ` + pgx.Identifier{granted}.Sanitize() + ` TO ` + r,
		`GRANT SELECT, UPDATE, DELETE ON ` + s("outbox_events") + ` TO ` + r,
		`GRANT SELECT, INSERT ON ` + s("outbox_events_archive") + ` TO ` + r,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + s("outbox_relays") + `, ` + s("outbox_leases") + ` TO ` + r,
	}
	if leases == outbox.LeasesPartitions {
		grants = append(grants,
			`GRANT SELECT ON `+s("outbox_migrations")+` TO `+r,
			`GRANT SELECT, UPDATE ON `+s("outbox_partitions")+` TO `+r,
			`GRANT SELECT, INSERT, UPDATE, DELETE ON `+s("outbox_partition_relays")+` TO `+r,
			`GRANT SELECT, UPDATE ON `+s("outbox_partition_in_flight")+` TO `+r)
	}
	pool := testutil.RolePool(t, b.pool, role, grants...)
	b.insert(t, granted, 3)
	b.insert(t, other, 3)

	rec := outboxtest.NewRecorder()
	ts, err := outbox.NewTenants(outbox.Postgres(pool), outbox.TenantsConfig{
		Relay:        outbox.RelayConfig{Sink: rec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Leases: leases},
		Schemas:      b.prefix + "*",
		ScanInterval: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, ts.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, ts.Stop(ctx))
	})
	require.Equal(t, []string{granted}, ts.Schemas())
	rec.WaitLen(t, 3, 10*time.Second)
	for _, e := range rec.Events() {
		require.Equal(t, granted, e.Tenant)
	}
}

// countingTracer counts the statements a pool sends.
type countingTracer struct{ n atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Idle tenants cost the scan's statements, not a claim per tenant per
// poll interval.
func TestTenantsIdleCostIsFlat(t *testing.T) {
	t.Parallel()
	b := setupTenants(t)
	const tenants = 40
	for i := range tenants {
		b.tenant(t, fmt.Sprint(i))
	}
	cfg, err := pgxpool.ParseConfig(testutil.DatabaseURL())
	require.NoError(t, err)
	tracer := &countingTracer{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ts, err := outbox.NewTenants(outbox.Postgres(pool), outbox.TenantsConfig{
		// A poll interval that would cost 40 claims a second per tenant
		// loop without the supervisor.
		Relay:   outbox.RelayConfig{Sink: outboxtest.NewRecorder(), PollInterval: 25 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Schemas: b.prefix + "*", ScanInterval: 250 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, ts.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, ts.Stop(ctx))
	})
	require.Len(t, ts.Schemas(), tenants)
	// Past the start: each relay's first claim, rescue and heartbeat.
	time.Sleep(500 * time.Millisecond) // a rate over wall time, not a wait for async work
	before, start := tracer.n.Load(), time.Now()
	time.Sleep(2 * time.Second)
	rate := float64(tracer.n.Load()-before) / time.Since(start).Seconds()
	t.Logf("%d idle tenants: %.1f statements/s", tenants, rate)
	require.Less(t, rate, 10.0, "one scan statement every 250ms, and nothing per tenant")
}

// With Listen, one connection in LISTEN wakes the tenant each writer's
// NOTIFY names; no scan is needed (it is an hour apart here).
func TestTenantsListenWakesTheNotifiedTenant(t *testing.T) {
	t.Parallel()
	b := setupTenants(t)
	acme, globex := b.tenant(t, "acme"), b.tenant(t, "globex")
	appName := "outbox-relay:" + b.prefix
	relayPool := testutil.NewPool(t, appName)
	rec := outboxtest.NewRecorder()
	ts, err := outbox.NewTenants(outbox.Postgres(relayPool), outbox.TenantsConfig{
		Relay:        outbox.RelayConfig{Sink: rec, Listen: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Schemas:      b.prefix + "*",
		ScanInterval: time.Hour, IdlePoll: time.Hour,
	})
	require.NoError(t, err)
	require.NoError(t, ts.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, ts.Stop(ctx))
	})
	listening := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, appName).Scan(&n))
		return n
	}
	testutil.WaitFor(t, 10*time.Second, "listening", func() bool { return listening() == 1 })
	for i, s := range []string{globex, acme, globex} {
		w := outbox.NewWriter(outbox.WriterConfig{Schema: s, NotifyInterval: time.Nanosecond})
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		_, err = w.Write(b.ctx, tx, outbox.Message{EventType: "woke", Payload: i})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(b.ctx))
		rec.WaitLen(t, i+1, 10*time.Second)
		require.Equal(t, s, rec.Events()[i].Tenant)
	}
	require.Equal(t, 1, listening(), "one LISTEN connection for every tenant")
}

// Ordered delivery (--ordering aggregate) under Tenants: order is per
// tenant and key. Both tenants have the same keys and the same IDs; one
// tenant's key fails twice, holding back that key's later events in that
// tenant only, and every (tenant, key) is acknowledged in commit order.
func TestTenantsOrderedAggregatePerTenantAndKey(t *testing.T) {
	t.Parallel()
	b := setupTenants(t)
	acme, globex := b.tenant(t, "acme"), b.tenant(t, "globex")
	const keys, rounds = 5, 4
	for _, s := range []string{acme, globex} {
		for range rounds {
			_, err := b.pool.Exec(b.ctx, `INSERT INTO `+testutil.Table(s)+` (event_type, aggregate_type, aggregate_id, payload)
SELECT 'thing.happened', 'thing', 'k' || g, '{}' FROM generate_series(0, $1 - 1) g ORDER BY g`, keys)
			require.NoError(t, err)
		}
	}
	want := map[string][]int64{} // tenant/key → ids in commit order
	for _, s := range []string{acme, globex} {
		rows, err := b.pool.Query(b.ctx, `SELECT id, aggregate_id FROM `+testutil.Table(s)+` ORDER BY id`)
		require.NoError(t, err)
		for rows.Next() {
			var (
				id  int64
				key string
			)
			require.NoError(t, rows.Scan(&id, &key))
			want[s+"/"+key] = append(want[s+"/"+key], id)
		}
		require.NoError(t, rows.Err())
	}
	stuck := want[acme+"/k1"][1] // acme's second k1 event; globex has the same id
	var (
		mu       sync.Mutex
		failures int
	)
	sink := &orderSink{}
	sink.setFail(func(e outbox.Event) error {
		if e.Tenant == acme && e.ID == stuck {
			mu.Lock()
			defer mu.Unlock()
			if failures < 2 {
				failures++
				return fmt.Errorf("refused %d", failures)
			}
		}
		return nil
	})
	b.start(t, outbox.TenantsConfig{Relay: outbox.RelayConfig{Sink: sink, Ordering: outbox.OrderingAggregate, BatchSize: 4,
		Workers: 2, MaxAttempts: 5, BackoffBase: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond}})
	testutil.WaitFor(t, 30*time.Second, "every event of both tenants processed", func() bool {
		n := 0
		for _, s := range []string{acme, globex} {
			var c int
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+testutil.Table(s)+` WHERE status = 'processed'`).Scan(&c))
			n += c
		}
		return n == 2*keys*rounds
	})
	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.Zero(t, sink.unordered, "every publish asked for key order")
	got := map[string][]int64{}
	seen := map[string]bool{}
	for _, e := range sink.acked {
		if !seen[e.UniqueID()] {
			seen[e.UniqueID()] = true
			got[e.Tenant+"/"+e.AggregateID] = append(got[e.Tenant+"/"+e.AggregateID], e.ID)
		}
	}
	require.Equal(t, want, got, "per tenant and key, first acknowledgements in commit order")
	mu.Lock()
	require.Equal(t, 2, failures)
	mu.Unlock()
	// The failing key held back acme's later k1 events: none was sent
	// before the stuck event's third, successful, send.
	sends, okAt := 0, -1
	for i, e := range sink.sent {
		if e.Tenant == acme && e.ID == stuck {
			if sends++; sends == 3 {
				okAt = i
			}
		}
	}
	require.Equal(t, 3, sends)
	for i, e := range sink.sent {
		if e.Tenant == acme && e.AggregateID == "k1" && e.ID > stuck {
			require.Greater(t, i, okAt, "acme's k1 event %d was sent before %d succeeded", e.ID, stuck)
		}
	}
}

// Manager.TenantStats counts every tenant in one statement, each tenant's
// counts those of its own Manager.Stats; a tenant whose outbox is gone
// fails the count with an error naming it.
func TestManagerTenantStatsOneStatement(t *testing.T) {
	t.Parallel()
	b := setupTenants(t)
	var schemas []string
	for i, name := range []string{"a", "b", `x"; drop table y; --`} {
		s := b.tenant(t, name)
		b.insert(t, s, 5*(i+1))
		schemas = append(schemas, s)
	}
	_, err := b.pool.Exec(b.ctx, `UPDATE `+testutil.Table(schemas[1])+` SET status = 'failed' WHERE id <= 3`)
	require.NoError(t, err)
	cfg, err := pgxpool.ParseConfig(testutil.DatabaseURL())
	require.NoError(t, err)
	tracer := &countingTracer{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	db := outbox.Postgres(pool)

	before := tracer.n.Load()
	got, err := outbox.NewManager(db, outbox.ManagerConfig{}).TenantStats(b.ctx, schemas)
	require.NoError(t, err)
	require.Equal(t, int64(1), tracer.n.Load()-before, "one statement for every tenant")
	require.Len(t, got, len(schemas))
	for i, s := range schemas {
		want, err := outbox.NewManager(db, outbox.ManagerConfig{Schema: s}).Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, s, got[i].Schema)
		require.InDelta(t, want.OldestPendingAge.Seconds(), got[i].OldestPendingAge.Seconds(), 5)
		want.OldestPendingAge = got[i].OldestPendingAge
		require.Equal(t, want, got[i].Stats, s)
		require.Equal(t, int64(5*(i+1)), got[i].Pending+got[i].Failed, s)
	}
	require.Equal(t, int64(3), got[1].Failed)

	testutil.DropSchema(t, b.pool, schemas[1])
	_, err = outbox.NewManager(db, outbox.ManagerConfig{}).TenantStats(b.ctx, schemas)
	require.ErrorIs(t, err, outbox.ErrNoTable)
	require.ErrorContains(t, err, strconv.Quote(schemas[1]))
}
