package outboxprom

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	dbtest "github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	db     outbox.Database
	schema string
	mgr    *outbox.Manager
	reg    *prometheus.Registry
}

func setup(t *testing.T) bundle {
	t.Helper()
	pool, schema := dbtest.Schema(t)
	db := outbox.Postgres(pool)
	return bundle{ctx: context.Background(), pool: pool, db: db, schema: schema,
		mgr: outbox.NewManager(db, outbox.ManagerConfig{Schema: schema}), reg: prometheus.NewRegistry()}
}

// write commits one event per type in types.
func (b bundle) write(t *testing.T, types ...string) {
	t.Helper()
	msgs := make([]outbox.Message, len(types))
	for i, typ := range types {
		msgs[i] = outbox.Message{EventType: typ, AggregateType: "order", AggregateID: fmt.Sprint(i), Payload: map[string]int{"i": i}}
	}
	b.writeMsgs(t, msgs...)
}

func (b bundle) writeMsgs(t *testing.T, msgs ...outbox.Message) {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = outbox.NewWriter(outbox.WriterConfig{Schema: b.schema}).Write(b.ctx, tx, msgs...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
}

func (b bundle) startRelay(t *testing.T, cfg outbox.RelayConfig) {
	t.Helper()
	cfg.Schema = b.schema
	cfg.PollInterval = 20 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := outbox.NewRelay(b.db, cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
}

// families gathers reg into name → family.
func families(t *testing.T, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// series returns the metric of family name whose labels include want, or
// nil.
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	mf := fams[name]
	if mf == nil {
		return nil
	}
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if match {
			return m
		}
	}
	return nil
}

func counter(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	m := series(fams, name, labels)
	require.NotNil(t, m, "series %s%v missing", name, labels)
	return m.GetCounter().GetValue()
}

func TestRelayMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m, err := New(Config{Registerer: b.reg, Manager: b.mgr, Schema: b.schema, Sink: "recorder"})
	require.NoError(t, err)

	// 6 delivered, 2 rejected permanently, 2 failing until their 2 attempts
	// run out.
	b.write(t, "ok", "ok", "ok", "rejected", "flaky", "ok", "rejected", "ok", "flaky", "ok")
	rec := outboxtest.NewRecorder()
	rec.SetFail(func(e outbox.Event) error {
		switch e.EventType {
		case "rejected":
			return outbox.Permanent(errors.New("400 bad event"))
		case "flaky":
			return errors.New("broker unavailable")
		}
		return nil
	})
	b.startRelay(t, outbox.RelayConfig{Sink: rec, Hooks: []outbox.Hook{m}, MaxAttempts: 2,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	relayLabels := map[string]string{"schema": b.schema, "sink": "recorder"}
	// Poll the counters themselves: a scrape would take the table sample
	// too early.
	dbtest.WaitFor(t, 30*time.Second, "every event settled in the metrics", func() bool {
		return testutil.ToFloat64(m.published) == 6 && testutil.ToFloat64(m.dead) == 4
	})
	require.Zero(t, m.samples())
	// ANALYZE so the planner's estimate behind outbox_events{processed} is
	// exact, and take the first sample only now.
	_, err = b.pool.Exec(b.ctx, "ANALYZE "+dbtest.Table(b.schema))
	require.NoError(t, err)

	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	// The exact series the docs and dashboards rely on.
	want := fmt.Sprintf(`
# HELP outbox_events Events per status, sampled at most once per sample interval. pending, processing and failed are exact; processed is the planner's estimate.
# TYPE outbox_events gauge
outbox_events{schema=%[1]q,status="failed"} 4
outbox_events{schema=%[1]q,status="pending"} 0
outbox_events{schema=%[1]q,status="processed"} 6
outbox_events{schema=%[1]q,status="processing"} 0
# HELP outbox_oldest_pending_age_seconds Seconds the oldest due pending event has waited: the publisher's lag. 0 when nothing is due.
# TYPE outbox_oldest_pending_age_seconds gauge
outbox_oldest_pending_age_seconds{schema=%[1]q} 0
# HELP outbox_published_total Events the sink delivered and the relay marked processed.
# TYPE outbox_published_total counter
outbox_published_total{schema=%[1]q,sink="recorder"} 6
# HELP outbox_publish_errors_total Events the sink failed to publish, by kind: retryable errors are retried with backoff, permanent ones dead-letter the event.
# TYPE outbox_publish_errors_total counter
outbox_publish_errors_total{kind="permanent",schema=%[1]q,sink="recorder"} 2
outbox_publish_errors_total{kind="retryable",schema=%[1]q,sink="recorder"} 4
# HELP outbox_retries_total Failed publishes scheduled for another attempt after a backoff.
# TYPE outbox_retries_total counter
outbox_retries_total{schema=%[1]q,sink="recorder"} 2
# HELP outbox_dead_lettered_total Events moved to failed (dead-lettered): out of attempts or permanently rejected.
# TYPE outbox_dead_lettered_total counter
outbox_dead_lettered_total{schema=%[1]q,sink="recorder"} 4
# HELP outbox_released_total Claimed events handed back to pending without spending an attempt: the relay was stopping, or the sink was unreachable.
# TYPE outbox_released_total counter
outbox_released_total{schema=%[1]q,sink="recorder"} 0
`, b.schema)
	require.NoError(t, testutil.ScrapeAndCompare(srv.URL, strings.NewReader(want),
		"outbox_events", "outbox_oldest_pending_age_seconds", "outbox_published_total", "outbox_publish_errors_total",
		"outbox_retries_total", "outbox_dead_lettered_total", "outbox_released_total"))

	f := families(t, b.reg)
	hist := func(name string) *dto.Histogram {
		s := series(f, name, relayLabels)
		require.NotNil(t, s, "histogram %s missing", name)
		return s.GetHistogram()
	}
	// Every delivered event's latency, and nothing else.
	e2e := hist("outbox_commit_to_publish_seconds")
	require.Equal(t, uint64(6), e2e.GetSampleCount())
	require.Positive(t, e2e.GetSampleSum())
	require.Less(t, e2e.GetSampleSum(), 6*30.0)
	// Each claimed batch once; 10 first tries and 2 retries of the flaky
	// events were claimed.
	batches := hist("outbox_batch_size")
	require.Equal(t, 12.0, batches.GetSampleSum())
	for _, name := range []string{"outbox_claim_duration_seconds", "outbox_publish_duration_seconds", "outbox_mark_duration_seconds"} {
		require.Equal(t, batches.GetSampleCount(), hist(name).GetSampleCount(), name)
		require.Positive(t, hist(name).GetSampleSum(), name)
	}
	last := series(f, "outbox_last_batch_timestamp_seconds", relayLabels)
	require.NotNil(t, last)
	require.InDelta(t, float64(time.Now().Unix()), last.GetGauge().GetValue(), 60)
	require.Equal(t, int64(1), m.samples())
}

func TestTableGaugesAreSampledNotQueriedPerScrape(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m, err := New(Config{Registerer: b.reg, Manager: b.mgr, Schema: b.schema, SampleInterval: time.Minute})
	require.NoError(t, err)
	var (
		mu  sync.Mutex
		now = time.Now()
	)
	m.table.now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
	}
	pending := func() float64 {
		s := series(families(t, b.reg), "outbox_events", map[string]string{"status": "pending"})
		require.NotNil(t, s)
		return s.GetGauge().GetValue()
	}
	b.writeMsgs(t, outbox.Message{EventType: "late", AvailableAt: time.Now().Add(-time.Hour)},
		outbox.Message{EventType: "a"}, outbox.Message{EventType: "b"})

	require.Equal(t, 3.0, pending())
	age := series(families(t, b.reg), "outbox_oldest_pending_age_seconds", nil)
	require.InDelta(t, 3600, age.GetGauge().GetValue(), 60)
	require.Equal(t, int64(1), m.samples())

	// The table changes; scrapes within the interval, even concurrent
	// ones, serve the sample.
	b.write(t, "c", "d")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { _, _ = b.reg.Gather() })
	}
	wg.Wait()
	advance(59 * time.Second)
	require.Equal(t, 3.0, pending())
	require.Equal(t, int64(1), m.samples())

	// Once the interval has passed, one scrape takes one new sample.
	advance(time.Second)
	require.Equal(t, 5.0, pending())
	require.Equal(t, 5.0, pending())
	require.Equal(t, int64(2), m.samples())
}

func TestTableGaugesAbsentWhileSamplingFails(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	// A schema without the outbox table: every sample fails.
	mgr := outbox.NewManager(outbox.Postgres(pool), outbox.ManagerConfig{Schema: dbtest.EmptySchemaName(t)})
	reg := prometheus.NewRegistry()
	var logs strings.Builder
	m, err := New(Config{Registerer: reg, Manager: mgr, Schema: "missing", SampleInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))})
	require.NoError(t, err)
	for range 3 {
		f := families(t, reg)
		require.Nil(t, f["outbox_events"])
		require.Nil(t, f["outbox_oldest_pending_age_seconds"])
		require.Equal(t, 1.0, counter(t, f, "outbox_stats_errors_total", map[string]string{"schema": "missing"}))
	}
	require.Equal(t, int64(1), m.samples(), "a failed sample is cached for the interval too")
	require.Contains(t, logs.String(), "sampling the outbox statistics failed")
	// The relay's series are there regardless.
	require.Equal(t, 0.0, counter(t, families(t, reg), "outbox_published_total", map[string]string{"schema": "missing"}))
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func TestOnRescueCountsExpiriesAndDeadLetters(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := New(Config{Registerer: reg, Sink: "s"})
	require.NoError(t, err)
	var _ outbox.HookRescue = m
	m.OnRescue(context.Background(), outbox.RescueInfo{Rescued: []int64{1, 2, 3}})
	m.OnRescue(context.Background(), outbox.RescueInfo{Rescued: []int64{4}, Dead: []outbox.Event{{ID: 5}}})
	f := families(t, reg)
	l := map[string]string{"schema": outbox.SchemaDefault, "sink": "s"}
	require.Equal(t, 5.0, counter(t, f, "outbox_lease_expired_total", l))
	require.Equal(t, 1.0, counter(t, f, "outbox_dead_lettered_total", l))
}

func TestOnBatchStopsAndReleases(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := New(Config{Registerer: reg, Sink: "s"})
	require.NoError(t, err)
	created := time.Now().Add(-2 * time.Second)
	events := []outbox.Event{{ID: 1, CreatedAt: created}, {ID: 2, CreatedAt: created}, {ID: 3, CreatedAt: created}}
	stopped := errors.New("relay stopped")

	// Claimed while stopping: released unpublished, no publish observed.
	m.OnBatch(context.Background(), outbox.BatchInfo{Events: events, Errors: outbox.BatchError(3, stopped), Released: 3,
		ClaimDuration: time.Millisecond})
	// Hard stop mid-publish: one delivered, one rejected, one cancelled
	// and released.
	m.OnBatch(context.Background(), outbox.BatchInfo{Events: events,
		Errors:    []error{nil, outbox.Permanent(errors.New("bad")), context.Canceled},
		Published: 1, Dead: 1, Released: 1, PublishedAt: time.Now(), PublishDuration: time.Millisecond})

	f := families(t, reg)
	l := map[string]string{"schema": outbox.SchemaDefault, "sink": "s"}
	require.Equal(t, 1.0, counter(t, f, "outbox_published_total", l))
	require.Equal(t, 4.0, counter(t, f, "outbox_released_total", l))
	require.Equal(t, 1.0, counter(t, f, "outbox_dead_lettered_total", l))
	require.Equal(t, 0.0, counter(t, f, "outbox_publish_errors_total", map[string]string{"kind": KindRetryable}))
	require.Equal(t, 1.0, counter(t, f, "outbox_publish_errors_total", map[string]string{"kind": KindPermanent}))
	require.Equal(t, uint64(1), series(f, "outbox_publish_duration_seconds", l).GetHistogram().GetSampleCount())
	require.Equal(t, uint64(2), series(f, "outbox_claim_duration_seconds", l).GetHistogram().GetSampleCount())
	e2e := series(f, "outbox_commit_to_publish_seconds", l).GetHistogram()
	require.Equal(t, uint64(1), e2e.GetSampleCount())
	require.InDelta(t, 2, e2e.GetSampleSum(), 1)
	// No Manager, no table gauges.
	require.Nil(t, f["outbox_events"])
}

func TestRelayUp(t *testing.T) {
	t.Parallel()
	m, err := New(Config{Sink: "s"})
	require.NoError(t, err)
	up := func() float64 {
		return series(families(t, m.Registerer().(prometheus.Gatherer)), "outbox_relay_up", nil).GetGauge().GetValue()
	}
	require.Equal(t, 0.0, up())
	m.SetRelayUp(true)
	require.Equal(t, 1.0, up())
	m.SetRelayUp(false)
	require.Equal(t, 0.0, up())

	// The default registry New made is served by Handler.
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	require.Contains(t, string(body), `outbox_relay_up{schema="public",sink="s"} 0`)
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	_, err := New(Config{SampleInterval: -time.Second})
	var ce *outbox.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "SampleInterval", ce.Field)
	_, err = New(Config{SampleTimeout: -time.Second})
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "SampleTimeout", ce.Field)

	reg := prometheus.NewRegistry()
	_, err = New(Config{Registerer: reg, Sink: "a"})
	require.NoError(t, err)
	_, err = New(Config{Registerer: reg, Sink: "a"})
	require.ErrorContains(t, err, "distinct Config.Sink")
	// A second relay with its own sink label shares the registry.
	_, err = New(Config{Registerer: reg, Sink: "b"})
	require.NoError(t, err)
}

func TestSinkStateGauges(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := New(Config{Registerer: reg, Sink: "s"})
	require.NoError(t, err)
	var _ outbox.HookSinkState = m
	l := map[string]string{"schema": outbox.SchemaDefault, "sink": "s"}
	check := func(up float64, state outbox.CircuitState) {
		t.Helper()
		f := families(t, reg)
		require.Equal(t, up, series(f, "outbox_sink_up", l).GetGauge().GetValue())
		for _, s := range []outbox.CircuitState{outbox.CircuitClosed, outbox.CircuitOpen, outbox.CircuitHalfOpen} {
			want := 0.0
			if s == state {
				want = 1
			}
			require.Equal(t, want, series(f, "outbox_sink_circuit_state", map[string]string{"state": string(s)}).GetGauge().GetValue(), s)
		}
	}
	check(1, outbox.CircuitClosed)
	m.OnSinkState(context.Background(), outbox.SinkState{Circuit: outbox.CircuitOpen, Err: errors.New("connection refused")})
	check(0, outbox.CircuitOpen)
	m.OnSinkState(context.Background(), outbox.SinkState{Circuit: outbox.CircuitHalfOpen})
	check(0, outbox.CircuitHalfOpen)
	m.OnSinkState(context.Background(), outbox.SinkState{Circuit: outbox.CircuitClosed})
	check(1, outbox.CircuitClosed)
}
