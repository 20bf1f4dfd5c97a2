package main_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
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
	var doc map[string]float64
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	age := doc["oldest_pending_age_seconds"]
	require.GreaterOrEqual(t, age, 90.0)
	require.Less(t, age, 150.0)
	delete(doc, "oldest_pending_age_seconds")
	require.Equal(t, map[string]float64{"pending": 3, "processing": 1, "processed": 2, "failed": 1}, doc)

	res = outboxCmd(t, b.schema, "stats")
	requireOK(t, res)
	require.Regexp(t, `(?m)^pending +3$`, res.stdout)
	require.Regexp(t, `(?m)^processing +1$`, res.stdout)
	require.Regexp(t, `(?m)^processed +2$`, res.stdout)
	require.Regexp(t, `(?m)^failed +1$`, res.stdout)
	require.Regexp(t, `(?m)^oldest pending age +1m3\d`, res.stdout)
}

func TestStatsEmpty(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := outboxCmd(t, b.schema, "stats", "--json")
	requireOK(t, res)
	require.JSONEq(t, `{"pending":0,"processing":0,"processed":0,"failed":0,"oldest_pending_age_seconds":0}`, res.stdout)
}
