package bench_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cmd/outbox/internal/bench"
	"github.com/outboxkit/outbox/cmd/outbox/internal/dburl"
)

func TestDrainAndReference(t *testing.T) {
	t.Parallel()
	for _, kind := range databases {
		for _, mode := range bench.Retentions {
			t.Run(kind+"/"+string(mode), func(t *testing.T) {
				t.Parallel()
				var (
					mu              sync.Mutex
					scratchesDuring []int
				)
				b := newBundle(t, kind)
				b.start(t, bench.Config{Retentions: []outbox.Retention{mode},
					// Progress runs inside the scenario: its scratch space exists.
					Progress: func(string) {
						n := len(b.scratches(t))
						mu.Lock()
						defer mu.Unlock()
						scratchesDuring = append(scratchesDuring, n)
					}})

				res, err := b.runner.Run(b.ctx, []bench.Scenario{bench.ScenarioDrain, bench.ScenarioReference})
				require.NoError(t, err)
				require.Equal(t, kind, res.Database)
				require.NotEmpty(t, res.Server)
				require.Equal(t, kind == postgres, res.Autovacuum != nil, "autovacuum is PostgreSQL's")
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
					require.Positive(t, rep.RSSPeakBytes)
					requireTableSizes(t, kind, mode, rep.Table)
				}
				require.NotEqual(t, ref.Schema, drain.Schema, "each scenario in scratch space of its own")
				require.Nil(t, ref.DrainStats)
				require.NotNil(t, drain.DrainStats)
				require.Equal(t, ref.EventsPerS, drain.ReferenceEventsPerS)
				require.InDelta(t, drain.EventsPerS/ref.EventsPerS, drain.RatioToReference, 1e-9)

				mu.Lock()
				require.NotEmpty(t, scratchesDuring)
				for _, n := range scratchesDuring {
					require.Equal(t, 1, n, "one scratch space while a scenario runs")
				}
				mu.Unlock()
				require.Empty(t, b.scratches(t), "scratch spaces removed")
			})
		}
	}
}

// requireTableSizes checks what a drain's table readings hold on kind.
func requireTableSizes(t *testing.T, kind string, mode outbox.Retention, table bench.TableStats) {
	t.Helper()
	before, after := table.Before, table.After
	require.Positive(t, before.TotalBytes)
	require.Positive(t, after.TotalBytes)
	switch kind {
	case sqlite:
		// The file's size only; the rest is not measured.
		for _, ts := range []bench.TableSize{before, after} {
			require.Nil(t, ts.IndexBytes)
			require.Nil(t, ts.LiveTuples)
			require.Nil(t, ts.DeadTuples)
			require.Nil(t, ts.ArchiveTotalBytes)
		}
		require.GreaterOrEqual(t, after.TotalBytes, before.TotalBytes, "an SQLite file never shrinks")
		return
	case mariadb:
		for _, ts := range []bench.TableSize{before, after} {
			require.NotNil(t, ts.IndexBytes)
			require.NotNil(t, ts.ArchiveTotalBytes)
			require.Nil(t, ts.LiveTuples)
			require.Nil(t, ts.DeadTuples)
		}
		require.Positive(t, *before.IndexBytes)
		if mode == outbox.RetainArchive {
			require.Greater(t, *after.ArchiveTotalBytes, *before.ArchiveTotalBytes)
		}
		return
	}
	for _, ts := range []bench.TableSize{before, after} {
		require.NotNil(t, ts.IndexBytes)
		require.NotNil(t, ts.LiveTuples)
		require.NotNil(t, ts.DeadTuples)
		require.NotNil(t, ts.ArchiveTotalBytes)
	}
	require.EqualValues(t, 500, *before.LiveTuples)
	require.Positive(t, *before.IndexBytes)
	// Read after the scenario: what each retention mode leaves.
	switch mode {
	case outbox.RetainProcessed:
		require.Greater(t, after.TotalBytes, before.TotalBytes, "updated rows take new space")
	case outbox.RetainDelete:
		require.Less(t, *after.LiveTuples, *before.LiveTuples)
	case outbox.RetainArchive:
		require.Less(t, *after.LiveTuples, *before.LiveTuples)
		require.Greater(t, *after.ArchiveTotalBytes, *before.ArchiveTotalBytes)
	}
}

func TestDrainRunsItsReference(t *testing.T) {
	t.Parallel()
	b := setup(t, postgres, bench.Config{Events: 300, Retentions: []outbox.Retention{outbox.RetainDelete, outbox.RetainArchive}})
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
	require.Empty(t, b.scratches(t))
}

func TestSteady(t *testing.T) {
	t.Parallel()
	for _, kind := range databases {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind, bench.Config{Workers: 2})
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
			require.LessOrEqual(t, rep.EventsPerS*rep.Seconds, float64(rep.Events)+0.5)
			require.GreaterOrEqual(t, rep.BacklogEnd, int64(0))
			if kind != sqlite {
				// SQLite's write lock is not fair: writers running flat out
				// can hold the relay off for a while (in CI once for the
				// whole second), so its deliveries and backlog swing.
				require.Positive(t, rep.EventsPerS)
				require.False(t, rep.BacklogGrew, "2 writers cannot outrun the relay: backlog %d at the end, %d halfway", rep.BacklogEnd, rep.BacklogMid)
			}
			require.Zero(t, rep.Duplicates)
			require.Positive(t, rep.Table.After.TotalBytes)
			if kind == postgres {
				// The tables were emptied before the relay phase; processed rows stay.
				require.Zero(t, *rep.Table.Before.LiveTuples)
				require.Positive(t, *rep.Table.After.LiveTuples)
				require.Greater(t, rep.Table.After.TotalBytes, rep.Table.Before.TotalBytes)
			}
			require.Empty(t, b.scratches(t))
		})
	}
}

// wakesOf is the wake-up modes kind has: listen is PostgreSQL's.
func wakesOf(kind string) []bench.Wake {
	if kind == postgres {
		return bench.Wakes
	}
	return []bench.Wake{bench.WakePoll, bench.WakeProcess}
}

func TestLatency(t *testing.T) {
	t.Parallel()
	for _, kind := range databases {
		for _, wake := range wakesOf(kind) {
			t.Run(kind+"/"+string(wake), func(t *testing.T) {
				t.Parallel()
				b := setup(t, kind, bench.Config{Rate: 200, Retentions: []outbox.Retention{outbox.RetainDelete}})
				rep, err := b.runner.Latency(b.ctx, outbox.RetainDelete, wake)
				require.NoError(t, err)
				require.Equal(t, bench.ScenarioLatency, rep.Scenario)
				require.Equal(t, "delete", rep.Retention)
				require.NotNil(t, rep.LatencyStats)
				require.EqualValues(t, 200, rep.TargetEventsPerS)
				require.Positive(t, rep.Events)
				require.LessOrEqual(t, rep.Events, int64(200), "the pacer issues at most rate × duration")
				require.Equal(t, rep.Events, rep.Count, "every committed event measured")
				require.EqualValues(t, b.runner.Config().Writers, rep.WarmupEvents, "one warm-up event per writer connection")
				require.InDelta(t, float64(rep.Events)/rep.Seconds, rep.EventsPerS, 1e-6)
				require.Equal(t, rep.EventsPerS >= 0.99*200, rep.RateReached)
				require.Positive(t, rep.MaxMS)
				require.LessOrEqual(t, rep.P50MS, rep.P95MS)
				require.LessOrEqual(t, rep.P95MS, rep.P99MS)
				require.LessOrEqual(t, rep.P99MS, rep.MaxMS)
				require.Zero(t, rep.Duplicates)
				require.Positive(t, rep.Table.After.TotalBytes)
				if kind == postgres { // deleted rows stay as dead tuples
					require.Greater(t, rep.Table.After.TotalBytes, rep.Table.Before.TotalBytes)
				}
				require.Empty(t, b.scratches(t))
			})
		}
	}
}

// With an hour between polls, only the wake-ups can deliver the events
// quickly: each mode's wiring is what makes latency finish.
func TestLatencyWakeUps(t *testing.T) {
	t.Parallel()
	for _, kind := range databases {
		for _, wake := range wakesOf(kind)[1:] {
			t.Run(kind+"/"+string(wake), func(t *testing.T) {
				t.Parallel()
				// 200ms between events: longer than the relay's claims after
				// a delivery (5ms, then 50ms), so only a wake-up delivers
				// each in time; the poll is an hour away.
				b := setup(t, kind, bench.Config{Rate: 5, PollInterval: time.Hour})
				rep, err := b.runner.Latency(b.ctx, outbox.RetainProcessed, wake)
				require.NoError(t, err)
				require.Equal(t, rep.Events, rep.Count)
				require.Less(t, rep.MaxMS, 5000.0)
			})
		}
	}
}

// Only PostgreSQL has LISTEN: elsewhere the wake-up mode is refused before
// anything is opened.
func TestListenNeedsPostgres(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"sqlite:///nonexistent/dir/app.db", "mysql://nobody@127.0.0.1:1/db"} {
		u, err := dburl.Parse(raw)
		require.NoError(t, err)
		_, err = bench.Open(context.Background(), u, bench.Config{Wakes: []bench.Wake{bench.WakePoll, bench.WakeListen}})
		var ce *bench.ConfigError
		require.ErrorAs(t, err, &ce, raw)
		require.Equal(t, "Wakes", ce.Field)
		require.ErrorContains(t, err, "needs PostgreSQL's LISTEN/NOTIFY")
		require.ErrorContains(t, err, "use poll or process")
	}
}

func TestFailingSinkEndsTheScenario(t *testing.T) {
	t.Parallel()
	boom := errors.New("broker says no")
	sink := outbox.SinkFunc(func(_ context.Context, events []outbox.Event) []error {
		return outbox.BatchError(len(events), boom)
	})
	for _, kind := range databases {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind, bench.Config{Events: 50, Sink: sink, SinkName: "failing"})
			for _, sc := range []bench.Scenario{bench.ScenarioReference, bench.ScenarioDrain} {
				_, err := b.runner.Run(b.ctx, []bench.Scenario{sc})
				require.ErrorContains(t, err, "the sink rejected events")
				require.ErrorContains(t, err, "broker says no")
			}
			_, err := b.runner.Drain(b.ctx, outbox.RetainProcessed)
			require.ErrorContains(t, err, "broker says no")
			require.Empty(t, b.scratches(t))
		})
	}
}

func TestCancelDropsTheScratchSpace(t *testing.T) {
	t.Parallel()
	for _, kind := range databases {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			b := newBundle(t, kind)
			// Cancel at the first step, inside the scratch space.
			b.start(t, bench.Config{Progress: func(string) { cancel() }})
			_, err := b.runner.Run(ctx, []bench.Scenario{bench.ScenarioDrain})
			require.ErrorIs(t, err, context.Canceled)
			require.Empty(t, b.scratches(t))
		})
	}
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

// A size a database does not tell is absent; a measured zero is not.
func TestTableSizeJSON(t *testing.T) {
	t.Parallel()
	zero := int64(0)
	for _, tc := range []struct {
		ts   bench.TableSize
		want string
	}{
		{bench.TableSize{TotalBytes: 8192}, `{"total_bytes":8192}`},
		{bench.TableSize{TotalBytes: 8192, IndexBytes: &zero, LiveTuples: &zero, DeadTuples: &zero, ArchiveTotalBytes: &zero},
			`{"total_bytes":8192,"index_bytes":0,"live_tuples":0,"dead_tuples":0,"archive_total_bytes":0}`},
	} {
		b, err := json.Marshal(tc.ts)
		require.NoError(t, err)
		require.JSONEq(t, tc.want, string(b))
	}
	b, err := json.Marshal(bench.Result{Database: "sqlite"})
	require.NoError(t, err)
	require.NotContains(t, string(b), "autovacuum", "PostgreSQL only")
}

// keySink records, per publish, whether the relay asked for key order and
// the events' aggregate IDs.
type keySink struct {
	mu        sync.Mutex
	ordered   []string // aggregate IDs published with outbox.KeyOrdered
	unordered []string // aggregate IDs published without
}

func (s *keySink) Publish(ctx context.Context, events []outbox.Event) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range events {
		if outbox.KeyOrdered(ctx) {
			s.ordered = append(s.ordered, e.AggregateID)
		} else {
			s.unordered = append(s.unordered, e.AggregateID)
		}
	}
	return nil
}

// With OrderedKeys, latency runs again after the unordered run with an
// ordered relay, the writers' events spread over that many aggregates,
// and reports the same statistics beside it.
func TestOrderedLatency(t *testing.T) {
	t.Parallel()
	for _, kind := range databases {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sink := &keySink{}
			b := setup(t, kind, bench.Config{Rate: 200, OrderedKeys: []int{7}, Sink: sink, SinkName: "keys"})
			res, err := b.runner.Run(b.ctx, []bench.Scenario{bench.ScenarioLatency})
			require.NoError(t, err)
			require.Len(t, res.Scenarios, 2)
			plain, ordered := res.Scenarios[0], res.Scenarios[1]
			require.Empty(t, plain.Ordering)
			require.Zero(t, plain.Keys)
			require.Equal(t, "aggregate", ordered.Ordering)
			require.Equal(t, 7, ordered.Keys)
			for _, rep := range []bench.Report{plain, ordered} {
				require.Equal(t, bench.ScenarioLatency, rep.Scenario)
				require.Equal(t, bench.WakePoll, rep.Wake)
				require.NotNil(t, rep.LatencyStats)
				require.Positive(t, rep.Events)
				require.Equal(t, rep.Events, rep.Count, "every committed event measured")
				require.Zero(t, rep.Duplicates)
				require.LessOrEqual(t, rep.P50MS, rep.P99MS)
				require.Positive(t, rep.MaxMS)
			}
			require.NotEqual(t, plain.Schema, ordered.Schema)

			sink.mu.Lock()
			defer sink.mu.Unlock()
			require.Len(t, sink.unordered, int(plain.Events+plain.WarmupEvents), "the unordered run's events and its warm-up, published without key order")
			require.Len(t, sink.ordered, int(ordered.Events+ordered.WarmupEvents), "the ordered run's events and its warm-up, published in key order")
			keys := map[string]bool{}
			for _, a := range sink.ordered {
				keys[a] = true
			}
			require.Len(t, keys, 7, "the writers spread the events over 7 aggregates: %v", keys)
			for k := range 7 {
				require.True(t, keys[strconv.Itoa(k)], "aggregate %d", k)
			}
			require.Empty(t, b.scratches(t))
		})
	}
}

// An ordered latency run needs a positive key count and a relay with an
// ordered mode.
func TestOrderedLatencyRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t, sqlite, bench.Config{Rate: 50})
	var ce *bench.ConfigError
	_, err := b.runner.OrderedLatency(b.ctx, outbox.RetainProcessed, bench.WakePoll, 0)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "OrderedKeys", ce.Field)
	_, err = b.runner.OrderedLatency(b.ctx, outbox.RetainProcessed, bench.WakeLogical, 10)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "Wakes", ce.Field)
	require.ErrorContains(t, err, "no ordered mode")
	require.Empty(t, b.scratches(t))
}
