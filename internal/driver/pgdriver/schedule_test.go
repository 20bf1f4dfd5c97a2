package pgdriver_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver/pgdriver"
)

// TestDeadLetterRetryPlansUseTheirIndex: with a dead-letter queue of
// events out of slow retries, as after months of running, both passes of
// the slow retry read their own partial index under a generic
// plan, never the whole table or every failed row.
func TestDeadLetterRetryPlansUseTheirIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (event_type, payload, status, processed_at)
		SELECT 'e', '{}', 'processed', now() FROM generate_series(1, 20000)`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (event_type, payload, status, dead_letter_retries)
		SELECT 'e', '{}', 'failed', 3 FROM generate_series(1, 5000)`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `ANALYZE `+b.drv.Table())
	require.NoError(t, err)

	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SET LOCAL plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	schedule, retry := pgdriver.DeadLetterSQL(b.drv)
	for name, c := range map[string]struct{ prepare, args, index string }{
		"schedule": {`PREPARE schedule_plan(bigint, int, int) AS ` + schedule, "(3600000, 3, 1000)", "outbox_events_dead_letter_unscheduled_idx"},
		"retry":    {`PREPARE retry_plan(int, int) AS ` + retry, "(3, 1000)", "outbox_events_dead_letter_due_idx"},
	} {
		_, err = tx.Exec(b.ctx, c.prepare)
		require.NoError(t, err)
		rows, err := tx.Query(b.ctx, `EXPLAIN EXECUTE `+name+`_plan`+c.args)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		plan := strings.Join(lines, "\n")
		t.Log(plan)
		require.Contains(t, plan, c.index, name)
		require.NotContains(t, plan, "Seq Scan", name)
		require.Contains(t, plan, "Index Cond: (id = ANY", "%s: the update finds its rows by ID", name)
	}
}
