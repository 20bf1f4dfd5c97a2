package pgdriver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
)

func (b bundle) insertKeyed(t *testing.T, keys ...string) {
	t.Helper()
	events := make([]driver.NewEvent, len(keys))
	for i, k := range keys {
		events[i] = driver.NewEvent{EventType: "e", AggregateType: "order", AggregateID: k, Payload: []byte(`{}`), Headers: []byte(`{}`)}
	}
	b.insertEvents(t, events)
}

// claimOrdered claims once; an empty claim is what the caller expects.
func (b bundle) claimOrdered(t *testing.T, relay string, n int, skip bool) driver.Claim {
	t.Helper()
	c, err := b.drv.ClaimOrdered(b.ctx, driver.OrderedClaimParams{RelayID: relay, BatchSize: n, Lease: time.Minute, Skip: skip})
	require.NoError(t, err)
	return c
}

// claimSome claims until the claim returns events: a transaction that
// another test keeps open anywhere on the server holds ordered claims back
// until it ends.
func (b bundle) claimSome(t *testing.T, relay string, n int, skip bool) driver.Claim {
	t.Helper()
	var c driver.Claim
	testutil.WaitFor(t, 10*time.Second, "an ordered claim returns events", func() bool {
		c = b.claimOrdered(t, relay, n, skip)
		return len(c.Events) > 0
	})
	return c
}

func keysOf(c driver.Claim) []string {
	out := make([]string, len(c.Events))
	for i, e := range c.Events {
		out[i] = e.AggregateID
	}
	return out
}

// A claim takes every key's events from its head on, in order; a second
// claim gets nothing of a key while the first holds its head.
func TestClaimOrderedTakesRunsPerKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertKeyed(t, "a", "b", "a", "", "b", "a")
	c := b.claimSome(t, "r1", 100, false)
	require.Equal(t, []string{"a", "a", "a", "b", "b", ""}, keysOf(c))
	ids := claimIDs(c)
	require.Less(t, ids[0], ids[1])
	require.Less(t, ids[1], ids[2])

	b.insertKeyed(t, "a", "c")
	require.Equal(t, []string{"c"}, keysOf(b.claimSome(t, "r2", 100, false)), "a is in flight")

	// A batch cut short is a prefix of each key.
	b.insertKeyed(t, "d", "d", "d")
	require.Equal(t, []string{"d", "d"}, keysOf(b.claimSome(t, "r3", 2, false)))
	require.Empty(t, b.claimOrdered(t, "r3", 2, false).Events, "d's head is in flight")
}

// A head in backoff, or dead under the block policy, holds its key's later
// events; other keys flow. Skip lets the key go on once the head is dead.
func TestClaimOrderedFailedHead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertKeyed(t, "a", "a", "b")
	c := b.claimSome(t, "r", 1, false)
	require.Equal(t, []string{"a"}, keysOf(c))
	head := c.Events[0].ID
	f := driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}
	_, err := b.drv.MarkFailed(b.ctx, f, 5, []driver.Failure{{ID: head, Error: "x", Delay: time.Hour}})
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, keysOf(b.claimSome(t, "r", 100, false)), "a waits for its head's retry")

	blocked, n, err := b.drv.BlockedAggregates(b.ctx, false, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, []driver.BlockedAggregate{{AggregateType: "order", AggregateID: "a", HeadID: head, HeadStatus: "pending", Waiting: 1}}, blocked)

	_, err = b.pool.Exec(b.ctx, `UPDATE `+b.drv.Table()+` SET status = 'failed' WHERE id = $1`, head)
	require.NoError(t, err)
	require.Empty(t, b.claimOrdered(t, "r", 100, false).Events, "block: a dead head holds its key")
	require.Equal(t, []string{"a"}, keysOf(b.claimSome(t, "r", 100, true)), "skip: a dead head lets its key go on")
}

// Events of a transaction that is still running hold back those of later
// transactions, whatever the order of the IDs; nothing is lost. Not
// parallel: its open transaction holds back every ordered claim on the
// server while it runs.
func TestClaimOrderedWaitsForOpenTransactions(t *testing.T) {
	b := setup(t)
	tx1, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx1.Rollback(b.ctx)
	// tx1 takes a transaction ID (it writes), not yet its event.
	_, err = tx1.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (event_type, aggregate_type, aggregate_id, payload) VALUES ('first', 'order', 'x', '{}')`)
	require.NoError(t, err)
	b.insertKeyed(t, "a", "b") // a later transaction, committed
	c := b.claimOrdered(t, "r", 100, false)
	require.Empty(t, c.Events, "a running transaction that started writing first holds them")
	require.True(t, c.Held, "the claim says committed events were held back, so that the relay claims again soon")
	require.NoError(t, tx1.Commit(b.ctx))
	c = b.claimSome(t, "r", 100, false)
	require.ElementsMatch(t, []string{"x", "a", "b"}, keysOf(c))
	c = b.claimOrdered(t, "r", 100, false)
	require.Empty(t, c.Events)
	require.False(t, c.Held, "nothing pending is held back")
}

// An event whose ID is lower but whose transaction committed later is still
// claimed after the events of its key already delivered.
func TestClaimOrderedLateLowerID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var early int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT nextval(pg_get_serial_sequence($1, 'id'))`, b.drv.Table()).Scan(&early))
	b.insertKeyed(t, "k")
	c := b.claimSome(t, "r", 100, false)
	require.Equal(t, []string{"k"}, keysOf(c))
	require.Greater(t, c.Events[0].ID, early)
	_, err := b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}, claimIDs(c), driver.RetainProcessed)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (id, event_type, aggregate_type, aggregate_id, payload) VALUES ($1, 'late', 'order', 'k', '{}')`, early)
	require.NoError(t, err)
	c = b.claimSome(t, "r", 100, false)
	require.Equal(t, []int64{early}, claimIDs(c))
}

// The row-lease ordered claim (schemas at migration 7; at 8 ordered relays
// read owned partitions) stays on the indexes under a generic plan, on a
// table dominated by processed rows: the key-order index for the probes and
// the runs, and no sequential scan (the heads come from the pending index,
// or from migration 8's partition index, which holds the same rows).
func TestClaimOrderedPlanUsesIndexesUnderGenericPlan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (event_type, aggregate_type, aggregate_id, payload, status, processed_at)
		SELECT 'e', 'order', (g % 500)::text, '{}', 'processed', now() FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	b.insertKeyed(t, "a", "b", "a")
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
	window, full := pgdriver.OrderedClaimSQL(b.drv)
	for name, sqlText := range map[string]string{"window": window, "full": full} {
		_, err = tx.Exec(b.ctx, `PREPARE `+name+`_plan(int, text, bigint) AS `+sqlText)
		require.NoError(t, err)
		rows, err := tx.Query(b.ctx, `EXPLAIN EXECUTE `+name+`_plan(1000, 'r', 30000)`)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		plan := strings.Join(lines, "\n")
		t.Log(plan)
		require.Contains(t, plan, "outbox_events_key_order_idx", plan)
		require.NotContains(t, plan, "Seq Scan on outbox_events", plan)
	}
}
