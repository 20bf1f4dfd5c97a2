package outboxmigrate_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxmigrate"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/jackc/puddle/v2.(*Pool[...]).createIdleResources"),
	)
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := outbox.Postgres(testutil.Pool(t))
	cfg := outboxmigrate.Config{Schema: testutil.EmptySchemaName(t)}
	latest := outboxmigrate.Latest(db)

	v, err := outboxmigrate.Version(ctx, db, cfg)
	require.NoError(t, err)
	require.Zero(t, v, "nothing applied yet")

	res, err := outboxmigrate.Migrate(ctx, db, cfg)
	require.NoError(t, err)
	require.Equal(t, latest.Version, res.Version)
	require.Len(t, res.Applied, latest.Version)
	require.Equal(t, outboxmigrate.Migration{Version: 1, Name: "create_outbox_events"}, res.Applied[0])

	again, err := outboxmigrate.Migrate(ctx, db, cfg)
	require.NoError(t, err)
	require.Empty(t, again.Applied)
	require.Equal(t, latest.Version, again.Version)

	// The migrated table is what the relay and the manager expect.
	require.NoError(t, outbox.NewManager(db, outbox.ManagerConfig{Schema: cfg.Schema}).Ping(ctx))
}

func TestSQLNeedsNoConnection(t *testing.T) {
	t.Parallel()
	sql := outboxmigrate.SQL(outbox.Postgres(nil), outboxmigrate.Config{Schema: "billing"})
	require.True(t, strings.HasPrefix(sql, "-- outbox schema for \"billing\""))
	require.Contains(t, sql, `CREATE TABLE "billing".outbox_events (`)
	require.Contains(t, sql, `CREATE TABLE "billing".outbox_events_archive (`)
	require.NotContains(t, sql, "{{schema}}")
}
