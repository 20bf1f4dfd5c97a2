package bench

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
)

// settle on PostgreSQL checkpoints: the last checkpoint's redo point moves
// past a write made just before.
func TestSettleCheckpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(testutil.DatabaseURL())
	require.NoError(t, err)
	st, err := openPostgres(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(st.ctl.Close)
	require.True(t, st.checkpoint, "the test database's user is a superuser")
	s, err := st.create(ctx, testutil.EmptySchemaName(t))
	require.NoError(t, err)
	require.NoError(t, s.createOrders(ctx))

	var written string
	require.NoError(t, st.ctl.QueryRow(ctx, `WITH w AS (INSERT INTO `+s.(*pgScratch).orders+` (customer, total_cents) VALUES ('c', 1) RETURNING id)
SELECT pg_current_wal_insert_lsn()::text FROM w`).Scan(&written))
	require.NoError(t, s.settle(ctx))
	var past bool
	require.NoError(t, st.ctl.QueryRow(ctx, `SELECT redo_lsn >= $1::pg_lsn FROM pg_control_checkpoint()`, written).Scan(&past))
	require.True(t, past, "settle checkpointed after the write at %s", written)
}
