package bench_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/bench"
	"github.com/outboxkit/outbox/internal/testutil"
)

// bundle is a Runner whose scratch schemas share a prefix of their own.
type bundle struct {
	ctx    context.Context
	runner *bench.Runner
	prefix string
	pool   *pgxpool.Pool // the shared test pool, for checks
}

// setup returns a bundle whose Runner is configured by cfg, with tiny
// defaults for what cfg leaves unset.
func setup(t *testing.T, cfg bench.Config) bundle {
	t.Helper()
	b := newBundle(t)
	b.start(t, cfg)
	return b
}

// newBundle returns a bundle without a Runner yet.
func newBundle(t *testing.T) bundle {
	t.Helper()
	var r [4]byte
	_, _ = rand.Read(r[:])
	b := bundle{ctx: context.Background(), prefix: "outbox_bench_t" + hex.EncodeToString(r[:]) + "_", pool: testutil.Pool(t)}
	// A failed test may leave its schemas behind; the assertions check
	// that the bench itself never does.
	t.Cleanup(func() {
		for _, s := range b.schemas(t) {
			testutil.DropSchema(t, b.pool, s)
		}
	})
	return b
}

// start sets b.runner.
func (b *bundle) start(t *testing.T, cfg bench.Config) {
	t.Helper()
	pc, err := pgxpool.ParseConfig(testutil.DatabaseURL())
	require.NoError(t, err)
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
	r, err := bench.New(b.ctx, pc, cfg)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	b.runner = r
}

// schemas lists the schemas whose name starts with the bundle's prefix.
func (b bundle) schemas(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)`, b.prefix)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

func TestDrainAndReference(t *testing.T) {
	t.Parallel()
	for _, mode := range bench.Retentions {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			var (
				mu            sync.Mutex
				schemasDuring []int
			)
			b := newBundle(t)
			b.start(t, bench.Config{Retentions: []outbox.Retention{mode},
				// Progress runs inside the scenario: its scratch schema exists.
				Progress: func(string) {
					n := len(b.schemas(t))
					mu.Lock()
					defer mu.Unlock()
					schemasDuring = append(schemasDuring, n)
				}})

			res, err := b.runner.Run(b.ctx, []bench.Scenario{bench.ScenarioDrain, bench.ScenarioReference})
			require.NoError(t, err)
			require.Len(t, res.Scenarios, 2)
			ref, drain := res.Scenarios[0], res.Scenarios[1]
			require.Equal(t, bench.ScenarioReference, ref.Scenario)
			require.Equal(t, bench.ScenarioDrain, drain.Scenario)
			for _, rep := range []bench.Report{ref, drain} {
				require.Equal(t, string(mode), rep.Retention)
				require.EqualValues(t, 500, rep.Events, "every event delivered once")
				require.Zero(t, rep.Duplicates)
				require.Positive(t, rep.Seconds)
				require.InDelta(t, float64(rep.Events)/rep.Seconds, rep.EventsPerS, 1e-6)
				require.EqualValues(t, 500, rep.Table.Before.LiveTuples)
				require.Positive(t, rep.Table.Before.TotalBytes)
				require.Positive(t, rep.Table.Before.IndexBytes)
				require.Positive(t, rep.RSSPeakBytes)
				// Read after the scenario: what each retention mode leaves.
				switch mode {
				case outbox.RetainProcessed:
					require.Greater(t, rep.Table.After.TotalBytes, rep.Table.Before.TotalBytes, "updated rows take new space")
				case outbox.RetainDelete:
					require.Less(t, rep.Table.After.LiveTuples, rep.Table.Before.LiveTuples)
				case outbox.RetainArchive:
					require.Less(t, rep.Table.After.LiveTuples, rep.Table.Before.LiveTuples)
					require.Greater(t, rep.Table.After.ArchiveTotalBytes, rep.Table.Before.ArchiveTotalBytes)
				}
			}
			require.Nil(t, ref.DrainStats)
			require.NotNil(t, drain.DrainStats)
			require.Equal(t, ref.EventsPerS, drain.ReferenceEventsPerS)
			require.InDelta(t, drain.EventsPerS/ref.EventsPerS, drain.RatioToReference, 1e-9)

			mu.Lock()
			require.NotEmpty(t, schemasDuring)
			for _, n := range schemasDuring {
				require.Equal(t, 1, n, "one scratch schema while a scenario runs")
			}
			mu.Unlock()
			require.Empty(t, b.schemas(t), "scratch schemas dropped")
		})
	}
}

func TestDrainRunsItsReference(t *testing.T) {
	t.Parallel()
	b := setup(t, bench.Config{Events: 300, Retentions: []outbox.Retention{outbox.RetainDelete, outbox.RetainArchive}})
	res, err := b.runner.Run(b.ctx, []bench.Scenario{bench.ScenarioDrain})
	require.NoError(t, err)
	// Only drain reports, one per mode, each with its reference.
	require.Len(t, res.Scenarios, 2)
	for i, mode := range []string{"delete", "archive"} {
		rep := res.Scenarios[i]
		require.Equal(t, bench.ScenarioDrain, rep.Scenario)
		require.Equal(t, mode, rep.Retention)
		require.EqualValues(t, 300, rep.Events)
		require.NotNil(t, rep.DrainStats)
		require.Positive(t, rep.ReferenceEventsPerS)
		require.Positive(t, rep.RatioToReference)
	}
	require.Equal(t, []string{"delete", "archive"}, res.Settings.Retentions)
	require.Equal(t, 300, res.Settings.Events)
	require.NotEmpty(t, res.Server)
	require.Empty(t, b.schemas(t))
}

func TestSteady(t *testing.T) {
	t.Parallel()
	b := setup(t, bench.Config{Workers: 2})
	rep, err := b.runner.Steady(b.ctx, outbox.RetainProcessed, bench.WakePoll)
	require.NoError(t, err)
	require.Equal(t, bench.ScenarioSteady, rep.Scenario)
	require.Equal(t, bench.WakePoll, rep.Wake)
	require.NotNil(t, rep.SteadyStats)
	require.Positive(t, rep.WriterTPSWithoutRelay)
	require.Positive(t, rep.WriterTPSWithRelay)
	require.InDelta(t, rep.WriterTPSWithRelay/rep.WriterTPSWithoutRelay, rep.WriterTPSRatio, 1e-9)
	require.Positive(t, rep.Events)
	require.InDelta(t, float64(rep.Events)/rep.Seconds, rep.WriterTPSWithRelay, 1e-6)
	require.GreaterOrEqual(t, rep.Seconds, time.Second.Seconds())
	// The relay delivered what the writers committed, less the backlog.
	require.Positive(t, rep.EventsPerS)
	require.LessOrEqual(t, rep.EventsPerS*rep.Seconds, float64(rep.Events)+0.5)
	require.GreaterOrEqual(t, rep.BacklogEnd, int64(0))
	require.False(t, rep.BacklogGrew, "2 writers cannot outrun the relay: backlog %d at the end, %d halfway", rep.BacklogEnd, rep.BacklogMid)
	require.Zero(t, rep.Duplicates)
	// The tables were emptied before the relay phase; processed rows stay.
	require.Zero(t, rep.Table.Before.LiveTuples)
	require.Positive(t, rep.Table.After.LiveTuples)
	require.Greater(t, rep.Table.After.TotalBytes, rep.Table.Before.TotalBytes)
	require.Empty(t, b.schemas(t))
}

func TestLatency(t *testing.T) {
	t.Parallel()
	for _, wake := range bench.Wakes {
		t.Run(string(wake), func(t *testing.T) {
			t.Parallel()
			b := setup(t, bench.Config{Rate: 200, Retentions: []outbox.Retention{outbox.RetainDelete}})
			rep, err := b.runner.Latency(b.ctx, outbox.RetainDelete, wake)
			require.NoError(t, err)
			require.Equal(t, bench.ScenarioLatency, rep.Scenario)
			require.Equal(t, "delete", rep.Retention)
			require.NotNil(t, rep.LatencyStats)
			require.EqualValues(t, 200, rep.TargetEventsPerS)
			require.Positive(t, rep.Events)
			require.LessOrEqual(t, rep.Events, int64(200), "the pacer issues at most rate × duration")
			require.Equal(t, rep.Events, rep.Count, "every committed event measured")
			require.InDelta(t, float64(rep.Events)/rep.Seconds, rep.EventsPerS, 1e-6)
			require.Equal(t, rep.EventsPerS >= 0.99*200, rep.RateReached)
			require.Positive(t, rep.MaxMS)
			require.LessOrEqual(t, rep.P50MS, rep.P95MS)
			require.LessOrEqual(t, rep.P95MS, rep.P99MS)
			require.LessOrEqual(t, rep.P99MS, rep.MaxMS)
			require.Zero(t, rep.Duplicates)
			require.Greater(t, rep.Table.After.TotalBytes, rep.Table.Before.TotalBytes)
			require.Empty(t, b.schemas(t))
		})
	}
}

// With an hour between polls, only the wake-ups can deliver the events
// quickly: each mode's wiring is what makes latency finish.
func TestLatencyWakeUps(t *testing.T) {
	t.Parallel()
	for _, wake := range []bench.Wake{bench.WakeListen, bench.WakeProcess} {
		t.Run(string(wake), func(t *testing.T) {
			t.Parallel()
			b := setup(t, bench.Config{Rate: 50, PollInterval: time.Hour})
			rep, err := b.runner.Latency(b.ctx, outbox.RetainProcessed, wake)
			require.NoError(t, err)
			require.Equal(t, rep.Events, rep.Count)
			require.Less(t, rep.MaxMS, 5000.0)
		})
	}
}

func TestFailingSinkEndsTheScenario(t *testing.T) {
	t.Parallel()
	boom := errors.New("broker says no")
	sink := outbox.SinkFunc(func(_ context.Context, events []outbox.Event) []error {
		return outbox.BatchError(len(events), boom)
	})
	b := setup(t, bench.Config{Events: 50, Sink: sink, SinkName: "failing"})
	for _, sc := range []bench.Scenario{bench.ScenarioReference, bench.ScenarioDrain} {
		_, err := b.runner.Run(b.ctx, []bench.Scenario{sc})
		require.ErrorContains(t, err, "the sink rejected events")
		require.ErrorContains(t, err, "broker says no")
	}
	_, err := b.runner.Drain(b.ctx, outbox.RetainProcessed)
	require.ErrorContains(t, err, "broker says no")
	require.Empty(t, b.schemas(t))
}

func TestCancelDropsTheSchema(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := newBundle(t)
	// Cancel at the first step, inside the scratch schema.
	b.start(t, bench.Config{Progress: func(string) { cancel() }})
	_, err := b.runner.Run(ctx, []bench.Scenario{bench.ScenarioDrain})
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, b.schemas(t))
}

func TestResultJSON(t *testing.T) {
	t.Parallel()
	rep := bench.Report{Scenario: bench.ScenarioDrain, Retention: "processed", Events: 10, Seconds: 1, EventsPerS: 10,
		DrainStats: &bench.DrainStats{ReferenceEventsPerS: 20, RatioToReference: 0.5}}
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	// Scenario-specific fields sit at the top level, and only where they apply.
	require.InDelta(t, 0.5, doc["ratio_to_reference"], 1e-9)
	require.InDelta(t, 20, doc["reference_events_per_s"], 1e-9)
	require.NotContains(t, doc, "writer_tps_with_relay")
	require.NotContains(t, doc, "p99_ms")
	require.NotContains(t, doc, "wake")
	require.Contains(t, doc, "table")
	require.Contains(t, doc, "rss_peak_bytes")
}
