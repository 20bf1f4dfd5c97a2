package pgdriver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
)

// ownDatabase creates a database for t alone, dropped when t ends: the
// vacuum horizon counts every session of a database, and the shared test
// database has other tests' transactions open at any time.
func ownDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	admin := testutil.Pool(t)
	name := testutil.SchemaName(t)
	_, err := admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), `DROP DATABASE `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	cfg, err := pgxpool.ParseConfig(testutil.DatabaseURL())
	require.NoError(t, err)
	cfg.ConnConfig.Database = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // before the drop, which runs later
	return pool
}

func TestTableHealthHorizonHoldsDeadTuples(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := ownDatabase(t)
	const schema = "app events"
	_, err := pgdriver.Migrate(ctx, pool, schema)
	require.NoError(t, err)
	drv := pgdriver.New(pool, schema)
	_, err = pool.Exec(ctx, `INSERT INTO `+drv.Table()+` (event_type, payload) SELECT 'e', '{}' FROM generate_series(1, 10)`)
	require.NoError(t, err)

	h, err := drv.TableHealth(ctx)
	require.NoError(t, err)
	require.Len(t, h.Tables, 2)
	require.Equal(t, driver.TableEvents, h.Tables[0].Table)
	require.Equal(t, driver.TableArchive, h.Tables[1].Table)
	require.NotNil(t, h.Tables[0].Bytes)
	require.Positive(t, *h.Tables[0].Bytes, "heap and indexes of a table with rows")
	require.Nil(t, h.File)
	require.Nil(t, h.HistoryLength)
	require.NotNil(t, h.Horizon)
	require.Nil(t, h.Horizon.Holder, "nothing in this database holds a snapshot")

	// A session that took a REPEATABLE READ snapshot and went idle.
	appName := "health-holder-" + fmt.Sprint(time.Now().UnixNano())
	cfg, err := pgx.ParseConfig(pool.Config().ConnConfig.ConnString())
	require.NoError(t, err)
	cfg.Database = pool.Config().ConnConfig.Database
	cfg.RuntimeParams["application_name"] = appName
	holder, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	tx, err := holder.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	var pid int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	opened := time.Now()

	// Deleted after the snapshot: dead, but the snapshot may still see them.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `DELETE FROM `+drv.Table()+` WHERE id <= 5`)
	require.NoError(t, err)
	// Publish this backend's statistics now rather than within seconds.
	_, err = conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
	require.NoError(t, err)
	conn.Release()

	testutil.WaitFor(t, 20*time.Second, "the dead tuples in the statistics, and a horizon a second old", func() bool {
		h, err = drv.TableHealth(ctx)
		require.NoError(t, err)
		return *h.Tables[0].DeadTuples >= 5 && time.Since(opened) > time.Second
	})
	h, err = drv.TableHealth(ctx)
	require.NoError(t, err)
	hz := h.Horizon
	require.NotNil(t, hz.Holder)
	require.Equal(t, driver.HorizonHolder{Kind: driver.HorizonSession, PID: pid, Name: appName,
		User: cfg.User, Client: hz.Holder.Client, State: "idle in transaction"}, *hz.Holder)
	require.GreaterOrEqual(t, hz.Age, time.Second)
	require.Less(t, hz.Age, time.Minute)
	require.NotNil(t, hz.XIDAge)
	require.GreaterOrEqual(t, *hz.XIDAge, int64(1), "the delete's transaction came after the snapshot")

	// VACUUM cannot remove what the snapshot may see.
	_, err = pool.Exec(ctx, `VACUUM `+drv.Table())
	require.NoError(t, err)
	h, err = drv.TableHealth(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, *h.Tables[0].DeadTuples, int64(5))
	require.WithinDuration(t, time.Now(), h.Tables[0].Vacuum.LastVacuum, time.Minute)
	require.True(t, h.Tables[0].Vacuum.LastAutovacuum.IsZero())

	// Once the snapshot is gone, the horizon is free and VACUUM removes
	// the dead tuples.
	require.NoError(t, tx.Rollback(ctx))
	h, err = drv.TableHealth(ctx)
	require.NoError(t, err)
	var zero int64
	require.Equal(t, &driver.Horizon{XIDAge: &zero}, h.Horizon)
	_, err = pool.Exec(ctx, `VACUUM `+drv.Table())
	require.NoError(t, err)
	h, err = drv.TableHealth(ctx)
	require.NoError(t, err)
	require.Zero(t, *h.Tables[0].DeadTuples)
	require.Equal(t, int64(5), *h.Tables[0].LiveRows, "VACUUM counts the live rows")
}

func TestTableHealthWithoutTable(t *testing.T) {
	t.Parallel()
	drv := pgdriver.New(testutil.Pool(t), testutil.EmptySchemaName(t))
	_, err := drv.TableHealth(context.Background())
	require.ErrorIs(t, err, driver.ErrNoTable)
}

func TestTableHealthSumsArchivePartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := testutil.Schema(t)
	archive := pgx.Identifier{schema, driver.TableArchive}.Sanitize()
	part := func(n string) string { return pgx.Identifier{schema, "archive_" + n}.Sanitize() }
	// An archive partitioned by hand: the parent holds no rows itself.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for _, q := range []string{
		`DROP TABLE ` + archive,
		`CREATE TABLE ` + archive + ` (id bigint, payload text) PARTITION BY RANGE (id)`,
		`CREATE TABLE ` + part("a") + ` PARTITION OF ` + archive + ` FOR VALUES FROM (0) TO (100)`,
		`CREATE TABLE ` + part("b") + ` PARTITION OF ` + archive + ` FOR VALUES FROM (100) TO (200)`,
		`INSERT INTO ` + archive + ` SELECT g, repeat('x', 100) FROM generate_series(1, 199) AS g`,
		// The inserts' statistics first, or they would count again on
		// top of VACUUM's count of live rows.
		`SELECT pg_stat_force_next_flush()`,
		`VACUUM ` + part("a") + `, ` + part("b"),
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}

	h, err := pgdriver.New(pool, schema).TableHealth(ctx)
	require.NoError(t, err)
	require.Len(t, h.Tables, 2)
	var want int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass) + pg_total_relation_size($2::regclass)`,
		part("a"), part("b")).Scan(&want))
	require.Positive(t, want)
	require.Equal(t, want, *h.Tables[1].Bytes)
	require.Equal(t, int64(199), *h.Tables[1].LiveRows, "counted by VACUUM in both partitions")
	require.WithinDuration(t, time.Now(), h.Tables[1].Vacuum.LastVacuum, time.Minute)
}
