package bench_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/cmd/outbox/internal/bench"
)

// The receive scenario stores every event once through the webhook
// handler and once with the hand-written loop, and reports both rates and
// their ratio; it removes its scratch schema.
func TestReceiveScenario(t *testing.T) {
	t.Parallel()
	b := setup(t, postgres, bench.Config{Events: 403, Writers: 4, BatchSize: 50})
	res, err := b.runner.Run(b.ctx, []bench.Scenario{bench.ScenarioReceive})
	require.NoError(t, err)
	require.Len(t, res.Scenarios, 1)
	rep := res.Scenarios[0]
	require.Equal(t, bench.ScenarioReceive, rep.Scenario)
	require.EqualValues(t, 403, rep.Events)
	require.Zero(t, rep.Duplicates)
	require.NotEmpty(t, rep.Schema)
	require.InDelta(t, float64(rep.Events)/rep.Seconds, rep.EventsPerS, 1e-6)
	require.NotNil(t, rep.DrainStats)
	require.Positive(t, rep.ReferenceEventsPerS)
	require.InDelta(t, rep.EventsPerS/rep.ReferenceEventsPerS, rep.RatioToReference, 1e-9)
	require.Positive(t, rep.HandHTTPEventsPerS)
	require.InDelta(t, rep.EventsPerS/rep.HandHTTPEventsPerS, rep.RatioToHandHTTP, 1e-9)
	require.Empty(t, b.scratches(t))
}

// Elsewhere than PostgreSQL, receive is left out with a note.
func TestReceiveScenarioPostgresOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, sqlite, bench.Config{Events: 10})
	res, err := b.runner.Run(b.ctx, []bench.Scenario{bench.ScenarioReceive})
	require.NoError(t, err)
	require.Empty(t, res.Scenarios)
	require.Contains(t, res.Notes, "receive did not run: it is PostgreSQL's, and this is SQLite.")
}

// With ReceiveBatch, the sink POSTs CloudEvents batches: every event is
// still stored exactly once (the scenario checks the rows), and the report
// says how many events went per request.
func TestReceiveScenarioBatched(t *testing.T) {
	t.Parallel()
	b := setup(t, postgres, bench.Config{Events: 203, Writers: 3, BatchSize: 50, ReceiveBatch: 7})
	res, err := b.runner.Run(b.ctx, []bench.Scenario{bench.ScenarioReceive})
	require.NoError(t, err)
	require.Len(t, res.Scenarios, 1)
	rep := res.Scenarios[0]
	require.EqualValues(t, 203, rep.Events)
	require.Zero(t, rep.Duplicates)
	require.Equal(t, 7, rep.WebhookBatch)
	require.Positive(t, rep.RatioToReference)
	require.Empty(t, b.scratches(t))
}
