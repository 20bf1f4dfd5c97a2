package pgbouncer_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/pgbouncer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBouncerPoolsTransactions(t *testing.T) {
	t.Parallel()
	b := pgbouncer.Start(t, testutil.DatabaseURL(), pgbouncer.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(b.URL(t, testutil.DatabaseURL()))
	require.NoError(t, err)
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var serverPID uint32
	var db string
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid(), current_database()`).Scan(&serverPID, &db))
	require.Equal(t, "test", db)
	require.NotEqual(t, serverPID, conn.PgConn().PID(), "PgBouncer gives the client a process ID of its own")

}
