package main_test

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver/drivertest"
)

func TestStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.writeN(t, 7)
	// 3 pending (the oldest due 90s ago), 1 processing, 2 processed, 1 failed.
	b.exec(t, `UPDATE {table} SET available_at = now() - interval '90 seconds' WHERE id = $1`, ids[0])
	b.exec(t, `UPDATE {table} SET status = 'processing', locked_by = 'other', locked_until = now() + interval '1 hour' WHERE id = $1`, ids[3])
	b.setProcessed(t, ids[4])
	b.setProcessed(t, ids[5])
	b.setFailed(t, ids[6], "boom")

	res := outboxCmd(t, b.schema, "stats", "--json")
	requireOK(t, res)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	age := doc["oldest_pending_age_seconds"].(float64)
	require.GreaterOrEqual(t, age, 90.0)
	require.Less(t, age, 150.0)
	counts := map[string]any{}
	for _, k := range []string{"pending", "processing", "processed", "failed"} {
		counts[k] = doc[k]
	}
	require.Equal(t, map[string]any{"pending": 3.0, "processing": 1.0, "processed": 2.0, "failed": 1.0}, counts)

	res = outboxCmd(t, b.schema, "stats")
	requireOK(t, res)
	require.Regexp(t, `(?m)^pending +3$`, res.stdout)
	require.Regexp(t, `(?m)^processing +1$`, res.stdout)
	require.Regexp(t, `(?m)^processed +2$`, res.stdout)
	require.Regexp(t, `(?m)^failed +1$`, res.stdout)
	require.Regexp(t, `(?m)^oldest pending age +1m3\d`, res.stdout)
	require.Regexp(t, `(?m)^outbox_events +\d+ live rows, \d+ dead tuples, \d+\.\d KiB$`, res.stdout)
	require.Regexp(t, `(?m)^outbox_events_archive +0 live rows, 0 dead tuples, \d+\.\d KiB$`, res.stdout)
	require.Regexp(t, `(?m)^  last vacuum +(never|\S+Z), auto (never|\S+Z)$`, res.stdout)
	require.Regexp(t, `(?m)^  last analyze +(never|\S+Z), auto (never|\S+Z)$`, res.stdout)
	// The test database is shared: another test's transaction may hold
	// the horizon, or none; a holder whose transaction began a moment
	// ago has no age yet ("age unknown").
	require.Regexp(t, `(?m)^vacuum horizon +(nothing holds it back|(\S+ old|age unknown) \(\d+ transactions\), held by .+)$`, res.stdout)
	require.NotContains(t, res.stdout, "history list length")
	require.NotContains(t, res.stdout, "database file")
}

// TestStatsHealthJSON checks the health keys of stats --json on
// PostgreSQL: every key present, null for what PostgreSQL does not report.
func TestStatsHealthJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.writeN(t, 3)
	res := outboxCmd(t, b.schema, "stats", "--json")
	requireOK(t, res)
	var doc struct {
		Tables        []map[string]any `json:"tables"`
		VacuumHorizon map[string]any   `json:"vacuum_horizon"`
		HistoryLength *float64         `json:"innodb_history_length"`
		SQLiteFile    map[string]any   `json:"sqlite_file"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	require.Len(t, doc.Tables, 2)
	for i, name := range []string{"outbox_events", "outbox_events_archive"} {
		tb := doc.Tables[i]
		require.Equal(t, name, tb["table"])
		require.Positive(t, tb["bytes"], name)
		require.GreaterOrEqual(t, tb["live_rows"], 0.0, name)
		require.GreaterOrEqual(t, tb["dead_tuples"], 0.0, name)
		require.Contains(t, tb, "free_bytes")
		require.Nil(t, tb["free_bytes"], "InnoDB only")
		require.IsType(t, map[string]any{}, tb["vacuum"])
		for _, k := range []string{"last_vacuum", "last_autovacuum", "last_analyze", "last_autoanalyze"} {
			require.Contains(t, tb["vacuum"], k)
		}
	}
	require.NotNil(t, doc.VacuumHorizon)
	require.GreaterOrEqual(t, doc.VacuumHorizon["age_seconds"], 0.0)
	require.GreaterOrEqual(t, doc.VacuumHorizon["xid_age"], 0.0)
	require.Contains(t, doc.VacuumHorizon, "holder")
	require.Nil(t, doc.HistoryLength)
	require.Nil(t, doc.SQLiteFile)
	require.Contains(t, res.stdout, `"innodb_history_length": null`)
	require.Contains(t, res.stdout, `"sqlite_file": null`)
}

// TestStatsHealthOnSQLDatabases runs stats on SQLite and MariaDB, which
// report other figures than PostgreSQL.
func TestStatsHealthOnSQLDatabases(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		url := "sqlite://" + filepath.Join(t.TempDir(), "app.db")
		requireOK(t, run(t, nil, "--database-url", url, "migrate"))
		res := run(t, nil, "--database-url", url, "stats")
		requireOK(t, res)
		require.Regexp(t, `(?m)^database file +\d+\.\d KiB, \d+ B free, WAL \d+`, res.stdout)
		require.NotContains(t, res.stdout, "outbox_events", "no per-table figures on SQLite")
		require.NotContains(t, res.stdout, "vacuum horizon")

		res = run(t, nil, "--database-url", url, "stats", "--json")
		requireOK(t, res)
		var doc map[string]any
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
		require.Nil(t, doc["vacuum_horizon"])
		require.Nil(t, doc["innodb_history_length"])
		require.Equal(t, map[string]any{"total": 0.0, "aggregates": []any{}}, doc["blocked_aggregates"], "SQLite has ordered delivery")
		require.NotContains(t, doc, "capture", "no logical replication on SQLite")
		file := doc["sqlite_file"].(map[string]any)
		require.Positive(t, file["bytes"])
		require.Contains(t, file, "wal_bytes")
		require.Equal(t, []any{
			map[string]any{"table": "outbox_events", "live_rows": nil, "dead_tuples": nil, "bytes": nil, "free_bytes": nil, "vacuum": nil},
			map[string]any{"table": "outbox_events_archive", "live_rows": nil, "dead_tuples": nil, "bytes": nil, "free_bytes": nil, "vacuum": nil},
		}, doc["tables"])
	})
	t.Run("mariadb", func(t *testing.T) {
		t.Parallel()
		name, _ := drivertest.MySQLDatabase(t)
		url := "mysql://root@127.0.0.1:3306/" + name
		requireOK(t, run(t, nil, "--database-url", url, "migrate"))
		res := run(t, nil, "--database-url", url, "stats")
		requireOK(t, res)
		require.Regexp(t, `(?m)^outbox_events +\d+ live rows, \d+\.\d KiB, \d+(\.\d)? K?i?B free$`, res.stdout)
		require.Regexp(t, `(?m)^history list length +\d+$`, res.stdout)
		require.Regexp(t, `(?m)^vacuum horizon +(nothing holds it back|\S+ old, held by session \d+ user \S+ from \S+, \w+)$`, res.stdout)
		require.NotContains(t, res.stdout, "dead tuples")
		require.NotContains(t, res.stdout, "last vacuum")

		res = run(t, nil, "--database-url", url, "stats", "--json")
		requireOK(t, res)
		var doc map[string]any
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
		require.GreaterOrEqual(t, doc["innodb_history_length"], 0.0)
		require.Nil(t, doc["sqlite_file"])
		require.NotContains(t, doc, "capture", "no logical replication on MariaDB")
		hz := doc["vacuum_horizon"].(map[string]any)
		require.Nil(t, hz["xid_age"], "InnoDB has no transaction ID age")
		for _, tb := range doc["tables"].([]any) {
			tb := tb.(map[string]any)
			require.Positive(t, tb["bytes"])
			require.Nil(t, tb["dead_tuples"])
			require.Nil(t, tb["vacuum"])
		}
	})
}

func TestStatsEmpty(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := outboxCmd(t, b.schema, "stats", "--json")
	requireOK(t, res)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	require.Equal(t, []any{}, doc["relays"], "no relay runs")
	require.Equal(t, map[string]any{"total": 0.0, "aggregates": []any{}}, doc["blocked_aggregates"], "no ordered delivery waits")
	require.Equal(t, map[string]any{"available": true, "slots": []any{}}, doc["capture"], "PostgreSQL, no capture slot")
	for _, k := range []string{"tables", "vacuum_horizon", "innodb_history_length", "sqlite_file", "relays", "blocked_aggregates", "capture"} {
		require.Contains(t, doc, k)
		delete(doc, k)
	}
	require.Equal(t, map[string]any{"pending": 0.0, "processing": 0.0, "processed": 0.0, "failed": 0.0, "oldest_pending_age_seconds": 0.0,
		"dead_letter_retry_waiting": 0.0, "dead_letter_retry_next_due": nil}, doc)
}
