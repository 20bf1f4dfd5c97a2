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
	require.Equal(t, outboxmigrate.Migration{Version: 13, Name: "relay_delivery"}, latest)

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
	var leases bool
	require.NoError(t, testutil.Pool(t).QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, `"`+cfg.Schema+`".outbox_leases`).Scan(&leases))
	require.True(t, leases, "migration 5 creates outbox_leases")
	var relays bool
	require.NoError(t, testutil.Pool(t).QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, `"`+cfg.Schema+`".outbox_relays`).Scan(&relays))
	require.True(t, relays, "migration 6 creates outbox_relays")

	// Storage settings for a table whose rows are rewritten twice soon
	// after they are written (docs/operations.md#autovacuum).
	var opts []string
	require.NoError(t, testutil.Pool(t).QueryRow(ctx, `SELECT reloptions FROM pg_class WHERE oid = to_regclass($1)`,
		`"`+cfg.Schema+`".outbox_events`).Scan(&opts))
	require.ElementsMatch(t, []string{"fillfactor=80", "autovacuum_vacuum_scale_factor=0.02", "autovacuum_vacuum_insert_scale_factor=0.05",
		"autovacuum_analyze_scale_factor=0.02", "autovacuum_vacuum_cost_delay=0"}, opts)
}

func TestSQLNeedsNoConnection(t *testing.T) {
	t.Parallel()
	sql := outboxmigrate.SQL(outbox.Postgres(nil), outboxmigrate.Config{Schema: "billing"})
	require.True(t, strings.HasPrefix(sql, "-- outbox schema for \"billing\""))
	require.Contains(t, sql, `CREATE TABLE "billing".outbox_events (`)
	require.Contains(t, sql, `CREATE TABLE "billing".outbox_events_archive (`)
	require.NotContains(t, sql, "{{schema}}")
}

func TestPartitionArchiveChecks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := outbox.Postgres(nil)

	// Nothing asked, nothing printed.
	sql, err := outboxmigrate.PartitionSQL(pg, outboxmigrate.Config{Schema: "billing"})
	require.NoError(t, err)
	require.Empty(t, sql)
	sql, err = outboxmigrate.PartitionSQL(pg, outboxmigrate.Config{Schema: "billing", PartitionArchive: outboxmigrate.PeriodDaily})
	require.NoError(t, err)
	require.Contains(t, sql, "PARTITION BY RANGE (processed_at)")
	require.Contains(t, sql, "sch      text := 'billing';")

	// Checked before connecting: a nil pool is never used.
	var cfgErr *outbox.ConfigError
	_, err = outboxmigrate.Migrate(ctx, pg, outboxmigrate.Config{PartitionArchive: "monthly"})
	require.ErrorAs(t, err, &cfgErr)
	require.Equal(t, "PartitionArchive", cfgErr.Field)
	_, err = outboxmigrate.PartitionSQL(pg, outboxmigrate.Config{PartitionArchive: "hourly"})
	require.ErrorAs(t, err, &cfgErr)

	for _, db := range []outbox.Database{outbox.SQLite(nil), outbox.MySQL(nil)} {
		_, err = outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{PartitionArchive: outboxmigrate.PeriodWeekly})
		require.ErrorIs(t, err, outboxmigrate.ErrPartitionUnsupported)
		_, err = outboxmigrate.PartitionSQL(db, outboxmigrate.Config{PartitionArchive: outboxmigrate.PeriodWeekly})
		require.ErrorIs(t, err, outboxmigrate.ErrPartitionUnsupported)
	}
}

func TestMigratePartitionArchive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := outbox.Postgres(testutil.Pool(t))
	cfg := outboxmigrate.Config{Schema: testutil.EmptySchemaName(t), PartitionArchive: outboxmigrate.PeriodWeekly}

	res, err := outboxmigrate.Migrate(ctx, db, cfg)
	require.NoError(t, err)
	require.Len(t, res.Applied, outboxmigrate.Latest(db).Version, "migrations and partitioning in one call")
	require.Equal(t, outboxmigrate.ArchivePartitioning{Period: outboxmigrate.PeriodWeekly, Converted: true}, res.Archive)

	again, err := outboxmigrate.Migrate(ctx, db, cfg)
	require.NoError(t, err)
	require.Empty(t, again.Applied)
	require.Equal(t, outboxmigrate.ArchivePartitioning{Period: outboxmigrate.PeriodWeekly}, again.Archive)

	cfg.PartitionArchive = outboxmigrate.PeriodDaily
	_, err = outboxmigrate.Migrate(ctx, db, cfg)
	require.ErrorIs(t, err, outboxmigrate.ErrPeriodChange)

	// Without the option, migrate leaves a partitioned archive alone.
	cfg.PartitionArchive = ""
	_, err = outboxmigrate.Migrate(ctx, db, cfg)
	require.NoError(t, err)
	period, parts, err := outbox.NewManager(db, outbox.ManagerConfig{Schema: cfg.Schema}).ArchivePartitions(ctx)
	require.NoError(t, err)
	require.Equal(t, "weekly", period)
	require.Len(t, parts, 1+4+1)
}
