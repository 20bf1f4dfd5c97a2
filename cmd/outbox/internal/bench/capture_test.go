package bench_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/cmd/outbox/internal/bench"
	"github.com/outboxkit/outbox/cmd/outbox/internal/dburl"
	"github.com/outboxkit/outbox/internal/testutil/pgcluster"
)

// TestCaptureScenarios runs drain, steady and latency with --capture all
// on a private cluster with wal_level = logical: the capture relay's runs
// come beside the table relay's, deliver every event once, and leave no
// scratch schema, slot or publication behind.
func TestCaptureScenarios(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{Settings: map[string]string{
		"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10",
	}})
	u, err := dburl.Parse(c.URL())
	require.NoError(t, err)
	ctx := context.Background()
	r, err := bench.Open(ctx, u, bench.Config{Events: 2000, BatchSize: 100, Writers: 2, Duration: time.Second, Rate: 200,
		Capture: bench.CaptureAll, SchemaPrefix: "outbox_bench_cdc_", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(r.Close)

	res, err := r.Run(ctx, []bench.Scenario{bench.ScenarioDrain, bench.ScenarioSteady, bench.ScenarioLatency})
	require.NoError(t, err)
	byKind := map[string]bench.Report{}
	for _, rep := range res.Scenarios {
		byKind[string(rep.Scenario)+"/"+string(rep.Wake)] = rep
	}
	drain, ok := byKind["drain/logical"]
	require.True(t, ok, "a capture drain: %v", byKind)
	require.EqualValues(t, 2000, drain.Events, "the burst delivered")
	require.Zero(t, drain.Duplicates)
	require.Positive(t, drain.EventsPerS)
	require.NotNil(t, drain.DrainStats)
	_, ok = byKind["drain/"]
	require.True(t, ok, "the table relay's drain beside it")
	steady := byKind["steady/logical"]
	require.NotNil(t, steady.SteadyStats)
	require.Positive(t, steady.WriterTPSWithRelay)
	require.Zero(t, steady.Duplicates)
	latency := byKind["latency/logical"]
	require.NotNil(t, latency.LatencyStats)
	require.Positive(t, latency.Count)
	require.Contains(t, byKind, "latency/poll")

	pool, err := pgxpool.New(ctx, c.URL())
	require.NoError(t, err)
	defer pool.Close()
	for _, q := range []string{
		`SELECT slot_name FROM pg_replication_slots`,
		`SELECT pubname FROM pg_publication`,
		`SELECT nspname FROM pg_namespace WHERE starts_with(nspname, 'outbox_bench_cdc_')`,
	} {
		rows, err := pool.Query(ctx, q)
		require.NoError(t, err)
		left, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Empty(t, left, "left behind: %s", q)
	}
}
