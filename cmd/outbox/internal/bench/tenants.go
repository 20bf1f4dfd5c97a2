package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// The tenants scenario's shape: issue 16's three targets.
const (
	// tenantsDrainTenants share the drain's backlog (Config.Events) in
	// equal parts.
	tenantsDrainTenants = 100
	// tenantsMany schemas are served in the idle and active phases, of
	// which tenantsActive write tenantsActiveRate events/s each.
	tenantsMany       = 1000
	tenantsActive     = 10
	tenantsActiveRate = 100
	// tenantsIdleWindow is how long the idle statements are counted, after
	// tenantsWarmUp past the relays' start.
	tenantsIdleWindow = 20 * time.Second
	tenantsWarmUp     = 5 * time.Second
	// tenantsQuietEvery is the quiet tenant's write interval during the
	// flood.
	tenantsQuietEvery = 20 * time.Millisecond
	// tenantsPoolConns is the relay pool's size in every phase.
	tenantsPoolConns = 8
)

// TenantsStats is what the tenants scenario measures (issue 16's targets).
type TenantsStats struct {
	// Tenants × EventsPerTenant events drained with outbox.Tenants, against
	// one schema's Tenants × EventsPerTenant with one relay, in this run.
	Tenants           int     `json:"tenants"`
	EventsPerTenant   int     `json:"events_per_tenant"`
	SingleEventsPerS  float64 `json:"single_events_per_s"`
	TenantsEventsPerS float64 `json:"tenants_events_per_s"`
	// DrainRatio is TenantsEventsPerS / SingleEventsPerS (target ≥ 0.8).
	DrainRatio float64 `json:"drain_ratio"`
	// A quiet tenant's commit→sink latency while another tenant drains a
	// backlog of FloodEvents (target: p99 ≤ 1s).
	FloodEvents int     `json:"flood_events"`
	QuietCount  int     `json:"quiet_count"`
	QuietP50MS  float64 `json:"quiet_p50_ms"`
	QuietP99MS  float64 `json:"quiet_p99_ms"`
	// ManyTenants schemas served by one Tenants: the statements per second
	// its pool runs while all are idle (target ≤ 100), then the
	// commit→sink latency while ActiveTenants of them write
	// ActiveRatePerTenant events/s each (target: p99 ≤ 1s).
	ManyTenants         int     `json:"many_tenants"`
	IdleStatementsPerS  float64 `json:"idle_statements_per_s"`
	ActiveTenants       int     `json:"active_tenants"`
	ActiveRatePerTenant int     `json:"active_rate_per_tenant"`
	ActiveCount         int     `json:"active_count"`
	ActiveP50MS         float64 `json:"active_p50_ms"`
	ActiveP99MS         float64 `json:"active_p99_ms"`
}

// Tenants runs the tenants scenario (PostgreSQL): the drain of 100 tenant
// schemas against one schema's, a quiet tenant's latency during another's
// flood, and 1,000 schemas' idle cost and active latency. Its schemas are
// named SchemaPrefix, a random part and the tenant's number, and dropped
// at the end.
func (r *Runner) Tenants(ctx context.Context) (rep Report, err error) {
	st, ok := r.st.(*pgStore)
	if !ok {
		return rep, &ConfigError{Field: "scenario", Err: errors.New("tenants needs PostgreSQL schemas")}
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := r.cfg.SchemaPrefix + hex.EncodeToString(b[:]) + "_"
	rep = Report{Scenario: ScenarioTenants, Retention: string(outbox.RetainProcessed), Schema: prefix + "*"}
	var created []string
	defer func() {
		dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		for _, s := range created {
			if _, derr := st.ctl.Exec(dropCtx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{s}.Sanitize()+` CASCADE`); derr != nil {
				err = errors.Join(err, fmt.Errorf("drop scratch schema %s: %w (drop it by hand)", s, derr))
				return
			}
		}
	}()
	create := func(name string) (string, error) {
		s := prefix + name
		if _, err := st.ctl.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{s}.Sanitize()); err != nil {
			return "", fmt.Errorf("create scratch schema %s (the bench needs CREATE on the database): %w", s, err)
		}
		created = append(created, s)
		if _, err := st.ctl.Exec(ctx, `COMMENT ON SCHEMA `+pgx.Identifier{s}.Sanitize()+` IS '`+schemaComment+`'`); err != nil {
			return "", err
		}
		if _, err := outboxmigrate.Migrate(ctx, outbox.Postgres(st.ctl), outboxmigrate.Config{Schema: s}); err != nil {
			return "", err
		}
		return s, nil
	}
	fill := func(s string, n int) error {
		_, err := st.ctl.Exec(ctx, `INSERT INTO `+pgx.Identifier{s, "outbox_events"}.Sanitize()+` (event_type, aggregate_type, aggregate_id, payload)
SELECT 'order.created', 'order', g::text, $2::jsonb FROM generate_series(1, $1::int) AS g`, n, string(r.payload))
		if err != nil {
			return fmt.Errorf("pre-fill %d events in %s: %w", n, s, err)
		}
		return nil
	}
	ts := &TenantsStats{Tenants: tenantsDrainTenants, EventsPerTenant: max(r.cfg.Events/tenantsDrainTenants, 1), FloodEvents: r.cfg.Events,
		ManyTenants: tenantsMany, ActiveTenants: tenantsActive, ActiveRatePerTenant: tenantsActiveRate}
	rep.TenantsStats = ts
	total := ts.Tenants * ts.EventsPerTenant

	// 1. One schema, one relay.
	r.progress("tenants: creating %d tenant schemas", tenantsDrainTenants+1)
	single, err := create("single")
	if err != nil {
		return rep, err
	}
	var schemas []string
	for i := range tenantsDrainTenants {
		s, err := create(fmt.Sprintf("%04d", i))
		if err != nil {
			return rep, err
		}
		schemas = append(schemas, s)
	}
	if err := fill(single, total); err != nil {
		return rep, err
	}
	r.progress("tenants: draining %d events from one schema", total)
	sink := newTenantSink(r.cfg.Sink)
	pool, _, err := r.tenantPool(ctx, st, "outbox-bench-tenants-single")
	if err != nil {
		return rep, err
	}
	relay, err := outbox.NewRelay(outbox.Postgres(pool), outbox.RelayConfig{Schema: single, Sink: sink, BatchSize: r.cfg.BatchSize,
		Workers: r.cfg.Workers, PollInterval: r.cfg.PollInterval, Logger: r.cfg.Logger, Leases: r.cfg.Leases})
	if err != nil {
		pool.Close()
		return rep, err
	}
	start := time.Now()
	if err := relay.Start(ctx); err != nil {
		pool.Close()
		return rep, err
	}
	err = poll(ctx, 5*time.Millisecond, func() (bool, error) { return sink.n.Load() >= int64(total), sink.failed() })
	ts.SingleEventsPerS = float64(total) / time.Since(start).Seconds()
	err = errors.Join(err, relay.Stop(context.WithoutCancel(ctx)))
	pool.Close()
	if err != nil {
		return rep, err
	}

	// 2. The same number of events over 100 tenants.
	for _, s := range schemas {
		if err := fill(s, ts.EventsPerTenant); err != nil {
			return rep, err
		}
	}
	r.progress("tenants: draining %d tenants × %d events", ts.Tenants, ts.EventsPerTenant)
	sink = newTenantSink(r.cfg.Sink)
	elapsed, err := r.runTenants(ctx, st, prefix+"0*", sink, 1, func() (bool, error) { return sink.n.Load() >= int64(total), nil })
	if err != nil {
		return rep, err
	}
	ts.TenantsEventsPerS = float64(total) / elapsed.Seconds()
	ts.DrainRatio = ratio(ts.TenantsEventsPerS, ts.SingleEventsPerS)
	rep.Events, rep.Seconds, rep.EventsPerS = int64(total), elapsed.Seconds(), ts.TenantsEventsPerS

	// 3. A quiet tenant during another's flood.
	flood, err := create("xflood")
	if err != nil {
		return rep, err
	}
	quiet, err := create("xquiet")
	if err != nil {
		return rep, err
	}
	if err := fill(flood, ts.FloodEvents); err != nil {
		return rep, err
	}
	r.progress("tenants: a quiet tenant's latency while another drains %d events", ts.FloodEvents)
	writers, err := r.tenantWriters(ctx, st, 2)
	if err != nil {
		return rep, err
	}
	defer writers.Close()
	sink = newTenantSink(r.cfg.Sink)
	sink.watch = map[string]bool{quiet: true}
	written := map[string]time.Time{}
	_, err = r.runTenants(ctx, st, prefix+"x*", sink, r.cfg.Workers, func() (bool, error) {
		// Write until the flood is 90% drained, one event per interval,
		// then wait for the quiet tenant's last events.
		if sink.n.Load() >= int64(ts.FloodEvents*9/10) {
			return sink.has(written), nil
		}
		id, at, err := writeOne(ctx, writers, quiet)
		if err != nil {
			return false, err
		}
		written[fmt.Sprintf("%s:%d", quiet, id)] = at
		time.Sleep(tenantsQuietEvery) // the quiet tenant's write rate, not a wait for work
		return false, nil
	})
	if err != nil {
		return rep, err
	}
	lat, err := sink.latencies(ctx, written)
	if err != nil {
		return rep, err
	}
	ts.QuietCount, ts.QuietP50MS, ts.QuietP99MS = len(lat), ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99))

	// 4. 1,000 tenant schemas: idle, then 10 of them active.
	r.progress("tenants: creating %d more tenant schemas", tenantsMany-tenantsDrainTenants)
	many := slices.Clone(schemas)
	for i := tenantsDrainTenants; i < tenantsMany; i++ {
		s, err := create(fmt.Sprintf("%04d", i))
		if err != nil {
			return rep, err
		}
		many = append(many, s)
	}
	r.progress("tenants: counting %d idle tenants' statements for %s", tenantsMany, tenantsIdleWindow)
	sink = newTenantSink(r.cfg.Sink)
	sink.watch = map[string]bool{}
	var active []string
	for i := range tenantsActive {
		s := many[i*(tenantsMany/tenantsActive)]
		active = append(active, s)
		sink.watch[s] = true
	}
	written = map[string]time.Time{}
	var writeMu sync.Mutex
	pool, tracer, err := r.tenantPool(ctx, st, "outbox-bench-tenants-many")
	if err != nil {
		return rep, err
	}
	defer pool.Close()
	tn, err := outbox.NewTenants(outbox.Postgres(pool), outbox.TenantsConfig{Schemas: prefix + "0*",
		Relay: outbox.RelayConfig{Sink: sink, BatchSize: r.cfg.BatchSize, Logger: r.cfg.Logger, Leases: r.cfg.Leases}})
	if err != nil {
		return rep, err
	}
	if err := tn.Start(ctx); err != nil {
		return rep, err
	}
	defer func() { err = errors.Join(err, tn.Stop(context.WithoutCancel(ctx))) }()
	if n := len(tn.Schemas()); n != tenantsMany {
		return rep, fmt.Errorf("tenants: %d schemas served, want %d", n, tenantsMany)
	}
	if err := sleepCtx(ctx, tenantsWarmUp); err != nil {
		return rep, err
	}
	before, idleStart := tracer.n.Load(), time.Now()
	if err := sleepCtx(ctx, tenantsIdleWindow); err != nil {
		return rep, err
	}
	ts.IdleStatementsPerS = float64(tracer.n.Load()-before) / time.Since(idleStart).Seconds()

	window := max(r.cfg.Duration/2, time.Second)
	r.progress("tenants: %d tenants write %d events/s each for %s", tenantsActive, tenantsActiveRate, window)
	activeWriters, err := r.tenantWriters(ctx, st, tenantsActive)
	if err != nil {
		return rep, err
	}
	defer activeWriters.Close()
	stop := time.Now().Add(window)
	var (
		wg   sync.WaitGroup
		werr atomic.Pointer[error]
	)
	for _, s := range active {
		wg.Go(func() {
			tick := time.NewTicker(time.Second / tenantsActiveRate)
			defer tick.Stop()
			for time.Now().Before(stop) && ctx.Err() == nil {
				<-tick.C
				id, at, err := writeOne(ctx, activeWriters, s)
				if err != nil {
					werr.Store(&err)
					return
				}
				writeMu.Lock()
				written[fmt.Sprintf("%s:%d", s, id)] = at
				writeMu.Unlock()
			}
		})
	}
	wg.Wait()
	if e := werr.Load(); e != nil {
		return rep, *e
	}
	lat, err = sink.latencies(ctx, written)
	if err != nil {
		return rep, err
	}
	ts.ActiveCount, ts.ActiveP50MS, ts.ActiveP99MS = len(lat), ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99))
	return rep, nil
}

// tenantPool opens a relay pool whose statements a tracer counts.
func (r *Runner) tenantPool(ctx context.Context, st *pgStore, name string) (*pgxpool.Pool, *stmtCounter, error) {
	pc := st.base.Copy()
	outbox.ConfigureRelayPool(pc, name)
	pc.MaxConns = tenantsPoolConns
	tracer := &stmtCounter{}
	pc.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to database: %w", err)
	}
	return pool, tracer, nil
}

func (r *Runner) tenantWriters(ctx context.Context, st *pgStore, conns int) (*pgxpool.Pool, error) {
	pc := st.base.Copy()
	pc.ConnConfig.RuntimeParams["application_name"] = "outbox-bench-tenant-writers"
	pc.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return pool, nil
}

// runTenants serves the schemas matching glob with outbox.Tenants on a pool
// of its own until done returns true, and returns how long that took.
func (r *Runner) runTenants(ctx context.Context, st *pgStore, glob string, sink *tenantSink, workers int, done func() (bool, error)) (time.Duration, error) {
	pool, _, err := r.tenantPool(ctx, st, "outbox-bench-tenants")
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	tn, err := outbox.NewTenants(outbox.Postgres(pool), outbox.TenantsConfig{Schemas: glob,
		Relay: outbox.RelayConfig{Sink: sink, BatchSize: r.cfg.BatchSize, Workers: workers, PollInterval: r.cfg.PollInterval, Logger: r.cfg.Logger,
			Leases: r.cfg.Leases}})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := tn.Start(ctx); err != nil {
		return 0, err
	}
	err = poll(ctx, 5*time.Millisecond, func() (bool, error) {
		if err := sink.failed(); err != nil {
			return false, err
		}
		return done()
	})
	elapsed := time.Since(start)
	return elapsed, errors.Join(err, tn.Stop(context.WithoutCancel(ctx)))
}

// writeOne commits one event into schema's outbox with plain SQL and
// returns its ID and commit-side timestamp (the database clock, as
// created_at).
func writeOne(ctx context.Context, pool *pgxpool.Pool, schema string) (int64, time.Time, error) {
	var (
		id int64
		at time.Time
	)
	err := pool.QueryRow(ctx, `INSERT INTO `+pgx.Identifier{schema, "outbox_events"}.Sanitize()+` (event_type, payload)
VALUES ('ping', '{}') RETURNING id, clock_timestamp()`).Scan(&id, &at)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("write into %s: %w", schema, err)
	}
	return id, at, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// tenantSink counts what it publishes through the configured sink and
// notes when each event of a watched tenant arrived.
type tenantSink struct {
	inner outbox.Sink
	n     atomic.Int64
	watch map[string]bool // read-only once the relays run
	mu    sync.Mutex
	at    map[string]time.Time // Event.UniqueID → arrival
	err   error
}

func newTenantSink(inner outbox.Sink) *tenantSink {
	return &tenantSink{inner: inner, at: map[string]time.Time{}}
}

func (s *tenantSink) Publish(ctx context.Context, events []outbox.Event) []error {
	errs := s.inner.Publish(ctx, events)
	now := time.Now()
	delivered := 0
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range events {
		if errs != nil && errs[i] != nil {
			s.err = errSinkFailed
			continue
		}
		delivered++
		if s.watch[e.Tenant] {
			if _, dup := s.at[e.UniqueID()]; !dup {
				s.at[e.UniqueID()] = now
			}
		}
	}
	s.n.Add(int64(delivered))
	return errs
}

// has reports whether every written event arrived.
func (s *tenantSink) has(written map[string]time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key := range written {
		if _, ok := s.at[key]; !ok {
			return false
		}
	}
	return true
}

func (s *tenantSink) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// latencies waits (at most 30 seconds) for every written event and
// returns the commit→sink latencies, sorted.
func (s *tenantSink) latencies(ctx context.Context, written map[string]time.Time) ([]time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var lat []time.Duration
	err := poll(ctx, 5*time.Millisecond, func() (bool, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for key := range written {
			if _, ok := s.at[key]; !ok {
				return false, nil
			}
		}
		lat = lat[:0]
		for key, at := range written {
			lat = append(lat, max(s.at[key].Sub(at), 0))
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("tenants: written events never reached the sink: %w", err)
	}
	slices.Sort(lat)
	return lat, nil
}

// stmtCounter counts the statements a pool runs (a pgx tracer).
type stmtCounter struct{ n atomic.Int64 }

func (c *stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
