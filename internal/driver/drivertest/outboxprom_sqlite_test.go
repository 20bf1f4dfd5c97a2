package drivertest_test

import (
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/outboxprom"
)

// TestOutboxpromHealthGaugesOnSQLite lives here rather than in outboxprom so
// that outboxprom's module needs no SQLite driver for its tests.
func TestOutboxpromHealthGaugesOnSQLite(t *testing.T) {
	t.Parallel()
	db := outbox.SQLite(drivertest.OpenSQLiteFile(t, filepath.Join(t.TempDir(), "outbox.db")))
	_, err := db.Driver("").Migrate(t.Context())
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	_, err = outboxprom.New(outboxprom.Config{Registerer: reg, Manager: outbox.NewManager(db, outbox.ManagerConfig{})})
	require.NoError(t, err)

	families, err := reg.Gather()
	require.NoError(t, err)
	values := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if f.GetName() != "outbox_events" || hasLabel(m.GetLabel(), "status", "pending") {
				values[f.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	require.Positive(t, values["outbox_sqlite_file_bytes"])
	require.Contains(t, values, "outbox_sqlite_free_bytes")
	require.Zero(t, values["outbox_sqlite_free_bytes"])
	require.Contains(t, values, "outbox_sqlite_wal_bytes")
	require.Contains(t, values, "outbox_events")
	require.Zero(t, values["outbox_events"])
	require.Zero(t, values["outbox_stats_errors_total"])
	require.Contains(t, values, "outbox_blocked_aggregates", "SQLite has ordered delivery")
	require.Zero(t, values["outbox_blocked_aggregates"])
	// SQLite cannot see dead rows or other connections' transactions: no
	// series, rather than zeros that would look healthy.
	for _, name := range []string{"outbox_table_dead_tuples", "outbox_table_bytes", "outbox_table_live_rows",
		"outbox_vacuum_horizon_age_seconds", "outbox_vacuum_horizon_xid_age", "outbox_innodb_history_length"} {
		require.NotContains(t, values, name)
	}
}

func hasLabel(labels []*dto.LabelPair, name, value string) bool {
	for _, l := range labels {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}
