package outboxprom

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	dbtest "github.com/outboxkit/outbox/internal/testutil"
)

func gauge(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	m := series(families(t, reg), name, labels)
	require.NotNil(t, m, "series %s%v missing", name, labels)
	return m.GetGauge().GetValue()
}

func TestHealthGaugesOnPostgres(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Every scrape samples: the test waits for PostgreSQL's statistics.
	_, err := New(Config{Registerer: b.reg, Manager: b.mgr, Schema: b.schema, SampleInterval: time.Nanosecond})
	require.NoError(t, err)
	b.write(t, "a", "b", "c", "d")
	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	_, err = conn.Exec(b.ctx, `DELETE FROM `+dbtest.Table(b.schema)+` WHERE event_type <> 'a'`)
	require.NoError(t, err)
	_, err = conn.Exec(b.ctx, `SELECT pg_stat_force_next_flush()`)
	require.NoError(t, err)
	conn.Release()

	events := map[string]string{"schema": b.schema, "table": "outbox_events"}
	dbtest.WaitFor(t, 20*time.Second, "3 dead tuples in the statistics", func() bool {
		return gauge(t, b.reg, "outbox_table_dead_tuples", events) >= 3
	})
	for _, table := range []string{"outbox_events", "outbox_events_archive"} {
		labels := map[string]string{"schema": b.schema, "table": table}
		require.Positive(t, gauge(t, b.reg, "outbox_table_bytes", labels), table)
		require.GreaterOrEqual(t, gauge(t, b.reg, "outbox_table_live_rows", labels), 0.0, table)
	}
	// The test database is shared: some other test's transaction may hold
	// the horizon, or none.
	require.GreaterOrEqual(t, gauge(t, b.reg, "outbox_vacuum_horizon_age_seconds", map[string]string{"schema": b.schema}), 0.0)
	require.GreaterOrEqual(t, gauge(t, b.reg, "outbox_vacuum_horizon_xid_age", nil), 0.0)

	_, err = b.pool.Exec(b.ctx, `VACUUM `+dbtest.Table(b.schema))
	require.NoError(t, err)
	vacuumed := gauge(t, b.reg, "outbox_table_last_vacuum_timestamp_seconds", events)
	require.InDelta(t, float64(time.Now().Unix()), vacuumed, 60)

	// What PostgreSQL does not report has no series at all.
	f := families(t, b.reg)
	for _, name := range []string{"outbox_table_free_bytes", "outbox_innodb_history_length",
		"outbox_sqlite_file_bytes", "outbox_sqlite_free_bytes", "outbox_sqlite_wal_bytes"} {
		require.Nil(t, f[name], name)
	}
}
