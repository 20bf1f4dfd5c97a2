package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
)

// The minimal loop's claim keeps its index plans under a generic plan (a
// prepared statement's sixth execution): the IN form once switched to a
// whole-table scan (shared/perf-notes.md). It claims no more than the
// limit, in id order, and the mark finds the rows by primary key.
func TestMinimalClaimPlan(t *testing.T) {
	t.Parallel()
	pool, schema := testutil.Schema(t)
	ctx := context.Background()
	s := &pgScratch{st: &pgStore{ctl: pool}, schemaName: schema, table: pgx.Identifier{schema, minimalTable}.Sanitize()}
	require.NoError(t, s.prefillMinimal(ctx, 3000, Payload(PayloadSizeDefault)))

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(context.Background(), `RESET plan_cache_mode`) }()
	m := newPgMinimal(nil, s.table)
	for name, stmt := range map[string]string{"claim": m.claimSQL, "mark": m.markSQL} {
		_, err := conn.Exec(ctx, `PREPARE minimal_`+name+` AS `+stmt)
		require.NoError(t, err)
		defer func() { _, _ = conn.Exec(context.Background(), `DEALLOCATE minimal_`+name) }()
	}
	explain := func(stmt string) string {
		rows, err := conn.Query(ctx, `EXPLAIN `+stmt)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}
	claimPlan := explain(`EXECUTE minimal_claim(100)`)
	require.NotContains(t, claimPlan, "Seq Scan", claimPlan)
	require.Contains(t, claimPlan, minimalTable+"_pending", "the partial index: %s", claimPlan)
	markPlan := explain(`EXECUTE minimal_mark('{1,2,3}')`)
	require.NotContains(t, markPlan, "Seq Scan", markPlan)

	// Executed: 100 rows, the first 100 by id, each leased once.
	rows, err := conn.Query(ctx, `EXECUTE minimal_claim(100)`)
	require.NoError(t, err)
	var ids []int64
	for rows.Next() {
		var id int64
		var payload []byte
		require.NoError(t, rows.Scan(&id, &payload))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, 100)
	var processing, attempts int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*), sum(attempts) FROM `+s.table+` WHERE status = 'processing' AND id <= 100 AND locked_until > now()`).
		Scan(&processing, &attempts))
	require.EqualValues(t, 100, processing)
	require.EqualValues(t, 100, attempts)
}
