package pgdriver_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
)

// The capture stream's marks read their rows through the primary key,
// under a generic plan and on a table without statistics (autovacuum has
// not run), beside a large unsettled backlog: not through the partition or
// pending index, which would read the whole backlog for every mark.
func TestCaptureSettlePlanUsesPrimaryKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.drv.EnsureCaptureTable(b.ctx))
	slot := "outbox_" + b.schema + "_default"
	_, err := b.pool.Exec(b.ctx, `INSERT INTO `+pgx.Identifier{b.schema, "outbox_capture"}.Sanitize()+` (slot_name, snapshot) VALUES ($1, pg_current_snapshot())`, slot)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (event_type, aggregate_type, aggregate_id, payload, txid)
		SELECT 'e', 'order', g::text, '{}', pg_current_xact_id() FROM generate_series(1, 20000) g`)
	require.NoError(t, err)

	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		for _, retention := range []driver.Retention{driver.RetainProcessed, driver.RetainDelete, driver.RetainArchive} {
			delivered, failed := pgdriver.CaptureSettleSQL(b.drv, retention)
			tx, err := conn.Begin(b.ctx)
			require.NoError(t, err)
			_, err = tx.Exec(b.ctx, `SET LOCAL plan_cache_mode = `+mode)
			require.NoError(t, err)
			explain := func(name, sqlText, types, args string) {
				stmt := name + "_" + mode + "_" + string(retention) // PREPARE outlives the rollback
				plan := explainPrepared(t, tx, stmt, sqlText, types, args)
				require.Contains(t, plan, "outbox_events_pkey", "%s, %s, %s:\n%s", name, mode, retention, plan)
				for _, idx := range []string{"outbox_events_partition_idx", "outbox_events_pending_idx", "Seq Scan on outbox_events"} {
					require.NotContains(t, plan, idx, "%s, %s, %s:\n%s", name, mode, retention, plan)
				}
			}
			types, args := "bigint[], text, text", `'{1,2,3}', '`+slot+`', 'r'`
			if retention == driver.RetainDelete {
				types, args = "bigint[], text", `'{1,2,3}', '`+slot+`'`
			}
			explain("settle_plan", delivered, types, args)
			explain("fail_plan", failed, "bigint[], text, text[], boolean[], bigint[], int, text",
				`'{1,2,3}', '`+slot+`', '{a,b,c}', '{f,f,t}', '{1,1,1}', 5, 'r'`)
			require.NoError(t, tx.Rollback(b.ctx))
		}
	}
}

// explainPrepared prepares sqlText as name with parameter types in tx and
// returns the plan of executing it with args (both SQL lists).
func explainPrepared(t *testing.T, tx pgx.Tx, name, sqlText, types, args string) string {
	t.Helper()
	_, err := tx.Exec(t.Context(), `PREPARE `+name+`(`+types+`) AS `+sqlText)
	require.NoError(t, err)
	rows, err := tx.Query(t.Context(), `EXPLAIN EXECUTE `+name+`(`+args+`)`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}
