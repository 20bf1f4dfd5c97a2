package pgdriver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
)

// A replay read walks the two primary keys from its keyset bound, within
// its window, each side stopped at the LIMIT: no sequential scan, no sort
// of the history, whatever the filter.
func TestReplayBatchPlan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	archive := pgx.Identifier{b.schema, "outbox_events_archive"}.Sanitize()
	_, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (event_type, aggregate_id, payload, status, processed_at)
SELECT 'e' || (i % 7), (i % 100)::text, '{}', 'processed', now() FROM generate_series(1, 100000) i`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `INSERT INTO `+archive+` (id, event_type, aggregate_id, payload, status, processed_at)
SELECT 200000 + i, 'e' || (i % 7), (i % 100)::text, '{}', 'processed', now() FROM generate_series(1, 100000) i`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `ANALYZE `+b.drv.Table()+`; ANALYZE `+archive)
	require.NoError(t, err)

	for name, p := range map[string]driver.ReplayParams{
		"no filter":      {AfterID: 5000, UpToID: 400000, Limit: 500},
		"type":           {Filter: driver.Filter{EventType: "e3"}, AfterID: 5000, UpToID: 400000, Limit: 500},
		"rare aggregate": {Filter: driver.Filter{AggregateID: "7", CreatedAfter: time.Now().Add(-time.Hour)}, AfterID: 50000, UpToID: 400000, Limit: 500},
		"in the archive": {Filter: driver.Filter{EventType: "e1"}, AfterID: 250000, UpToID: 400000, Limit: 500},
	} {
		sqlText, args, err := pgdriver.ReplayBatchSQL(b.drv, p)
		require.NoError(t, err)
		rows, err := b.pool.Query(b.ctx, `EXPLAIN `+sqlText, args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		plan := strings.Join(lines, "\n")
		t.Log(name, "\n", plan)
		require.Contains(t, plan, "outbox_events_pkey", name)
		require.Contains(t, plan, "outbox_events_archive_pkey", name)
		require.NotContains(t, plan, "Seq Scan", name)
		require.NotContains(t, plan, "Bitmap", name)

		events, next, err := b.drv.ReplayBatch(b.ctx, p)
		require.NoError(t, err)
		require.NotEmpty(t, events, name)
		if len(events) < p.Limit {
			require.Equal(t, p.AfterID+driver.ReplayWindow(p.Limit), next, name)
		} else {
			require.Equal(t, events[len(events)-1].ID, next, name)
		}
		for i := 1; i < len(events); i++ {
			require.Less(t, events[i-1].ID, events[i].ID, name)
		}
	}
}
