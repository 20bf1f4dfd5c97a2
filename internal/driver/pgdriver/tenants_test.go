package pgdriver_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
)

// statementCounter counts the statements a pool sends.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// CountSchemas counts many schemas with one statement per chunk, and
// each schema's counts are what its own Stats and DeadLetterRetryStats
// read, an injection-shaped schema name included.
func TestCountSchemasOneStatementPerChunk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := testutil.SchemaName(t)
	shared := testutil.Pool(t)
	schemas := []string{base + "_a", base + "_b", base + `_x"; drop table y; --`, base + "_d", base + "_e"}
	for i, s := range schemas {
		t.Cleanup(func() { testutil.DropSchema(t, shared, s) })
		_, err := pgdriver.Migrate(ctx, shared, s)
		require.NoError(t, err)
		// i*7 events of every status, some pending ones due i minutes ago,
		// and failed ones with a slow retry scheduled in schema i > 2.
		_, err = shared.Exec(ctx, `INSERT INTO `+testutil.Table(s)+` (event_type, payload, status, created_at, available_at, dead_letter_retry_at)
SELECT 'x', '{}', (ARRAY['pending','processing','processed','failed'])[1 + g % 4], now() - interval '1 minute' * $2, now() - interval '1 minute' * $2,
    CASE WHEN $2 > 2 AND g % 4 = 3 THEN now() + interval '1 hour' * g END
FROM generate_series(1, $1) g`, i*7, i)
		require.NoError(t, err)
	}
	cfg, err := pgxpool.ParseConfig(testutil.DatabaseURL())
	require.NoError(t, err)
	tracer := &statementCounter{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	drv := pgdriver.New(pool, "public")

	for _, tc := range []struct{ chunk, statements int }{{2, 3}, {5, 1}, {pgdriver.StatsChunk, 1}} {
		before := tracer.n.Load()
		got, err := pgdriver.CountSchemasChunked(ctx, drv, schemas, tc.chunk)
		require.NoError(t, err)
		require.Equal(t, int64(tc.statements), tracer.n.Load()-before, "chunk %d", tc.chunk)
		require.Len(t, got, len(schemas))
		for i, s := range schemas {
			one := pgdriver.New(shared, s)
			st, err := one.Stats(ctx)
			require.NoError(t, err)
			dl, err := one.DeadLetterRetryStats(ctx)
			require.NoError(t, err)
			require.Equal(t, s, got[i].Schema)
			require.Equal(t, [4]int64{st.Pending, st.Processing, st.Processed, st.Failed},
				[4]int64{got[i].Pending, got[i].Processing, got[i].Processed, got[i].Failed}, s)
			require.InDelta(t, st.OldestPendingAge.Seconds(), got[i].OldestPendingAge.Seconds(), 5, s)
			require.Equal(t, dl, got[i].DeadLetterRetry, s)
			if i > 0 {
				require.Positive(t, got[i].Pending+got[i].Processing+got[i].Processed+got[i].Failed, "a test that counts something")
			}
			if i > 2 {
				require.Positive(t, got[i].DeadLetterRetry.Waiting, "a scheduled slow retry counted")
				require.InDelta(t, float64(i*60), got[i].OldestPendingAge.Seconds(), 5, s)
			}
		}
	}
	var _ driver.TenantCounter = drv

	// A schema without an outbox fails the statement, and says so.
	_, err = drv.CountSchemas(ctx, append(schemas, base+"_none"))
	require.ErrorIs(t, err, driver.ErrNoTable)
}
