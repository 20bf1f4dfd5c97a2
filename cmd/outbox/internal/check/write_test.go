package check

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
)

func TestWriteRetryFindsWhatAnEarlierAttemptCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(testutil.DatabaseURL())
	require.NoError(t, err)
	sc, err := openScratch(ctx, &Config{DatabaseURL: testutil.DatabaseURL(), Postgres: pc})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sc.drop(context.Background())) })
	r := &run{sc: sc, report: &Report{}, cfg: Config{Logger: slog.New(slog.DiscardHandler)}}
	msgs := []outbox.Message{
		{EventType: "outbox.check", AggregateID: "agg-1", Payload: payload{Seq: 1}, IdempotencyKey: "k1"},
		{EventType: "outbox.check", AggregateID: "agg-1", Payload: payload{Seq: 2}, IdempotencyKey: "k2"},
	}
	// The first attempt committed, as a commit whose answer was lost does.
	first, err := sc.write(ctx, msgs)
	require.NoError(t, err)
	require.NotContains(t, first, int64(0))
	// Its retry writes nothing and finds the first attempt's IDs.
	ids, err := r.writeBatchRetrying(ctx, msgs)
	require.NoError(t, err)
	require.Equal(t, first, ids)
	s, err := sc.manager().Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, s.Pending, "no event written twice")
	require.Zero(t, r.report.WriteRetries)
}
