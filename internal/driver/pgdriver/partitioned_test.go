package pgdriver_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
)

// The partition read and its mark stay on the indexes under a generic
// plan, on a table with processed rows, a backlog and a dead-letter queue:
// the partition index for a partition's events, the primary key for the
// mark; no sequential scan of the outbox table (what holds keys back comes
// from the small partial indexes: processing, pending in the future), and
// under block one probe of the dead events by key per event read, never
// the dead-letter queue read whole.
func TestPartitionReadPlanUsesIndexesUnderGenericPlan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (event_type, aggregate_type, aggregate_id, payload, status, processed_at)
		SELECT 'e', 'order', (g % 500)::text, '{}', 'processed', now() FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (event_type, aggregate_type, aggregate_id, payload)
		SELECT 'e', 'order', (g % 500)::text, '{}' FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (event_type, aggregate_type, aggregate_id, payload, status, attempts)
		SELECT 'e', 'order', 'dead-' || g, '{}', 'failed', 1 FROM generate_series(1, 5000) g`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `ANALYZE `+b.drv.Table())
	require.NoError(t, err)
	held, relays, err := b.drv.BalancePartitions(b.ctx, driver.BalanceParams{RelayID: "r", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, [2]int{driver.Partitions, 1}, [2]int{held, relays})

	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SET LOCAL plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	read, mark := pgdriver.OwnedPartitionSQL(b.drv)
	explain := func(name, sqlText, types, args string) string {
		plan := explainPrepared(t, tx, name, sqlText, types, args)
		t.Log(plan)
		require.NotContains(t, plan, "Seq Scan on outbox_events", plan)
		return plan
	}
	plan := explain("read_plan", read, "int, text, bigint, int[], int", `1000, 'r', 30000, '{}', 0`)
	require.Contains(t, plan, "outbox_events_partition_idx", plan)
	require.Contains(t, plan, "outbox_events_dead_key_idx", plan, "a dead head is found by its key")
	require.NotContains(t, plan, "outbox_events_failed_idx", plan, "the dead-letter queue is not read whole")
	plan = explain("mark_plan", mark, "bigint[], text, int[], bigint[]", `'{1,2,3}', 'r', '{1,2}', '{1,1}'`)
	require.Contains(t, plan, "outbox_events_pkey", plan)
	require.NotContains(t, plan, "outbox_events_partition_idx", plan, "a mark reads its rows by ID, not the partition's backlog")
}

// A read writes nothing and keeps a key's order behind what blocks it: a
// retrying head holds its key's later events back while the other keys of
// the partition flow; a mark under a fence that no longer holds (the
// partition changed hands) changes nothing.
func TestPartitionReadAndFencedMark(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, _, err := b.drv.BalancePartitions(b.ctx, driver.BalanceParams{RelayID: "r", Lease: time.Minute})
	require.NoError(t, err)
	b.insertKeyed(t, "a", "b", "a", "b")
	read := func() driver.Claim {
		c, err := b.drv.ReadPartitions(b.ctx, driver.PartitionClaimParams{RelayID: "r", BatchSize: 100, MinLease: time.Second})
		require.NoError(t, err)
		return c
	}
	var c driver.Claim
	// Other tests' open transactions hold the horizon back for a moment.
	testutil.WaitFor(t, 10*time.Second, "the events are below the horizon", func() bool {
		c = read()
		return len(c.Events) == 4
	})
	require.Equal(t, []string{"a", "b", "a", "b"}, keysOf(c))
	require.Equal(t, c.Events, read().Events, "a read writes nothing")
	f := driver.Fence{RelayID: "r", Parts: c.Parts, Fences: c.Fences}
	// a's first event fails and retries later: a waits, b flows.
	_, err = b.drv.MarkFailed(b.ctx, f, 10, []driver.Failure{{ID: c.Events[0].ID, Error: "x", Delay: time.Hour}})
	require.NoError(t, err)
	require.Equal(t, []string{"b", "b"}, keysOf(read()))
	// Another relay takes the partitions over (their lease ended): the
	// old fence's marks change nothing.
	_, err = b.pool.Exec(b.ctx, `UPDATE `+pgx.Identifier{b.drv.Schema(), "outbox_partitions"}.Sanitize()+` SET lease_until = now() - interval '1 second'`)
	require.NoError(t, err)
	_, _, err = b.drv.BalancePartitions(b.ctx, driver.BalanceParams{RelayID: "s", Lease: time.Minute})
	require.NoError(t, err)
	n, err := b.drv.MarkProcessed(b.ctx, f, claimIDs(c)[1:], driver.RetainProcessed)
	require.NoError(t, err)
	require.Zero(t, n, "a stale fence marks nothing")
	c2, err := b.drv.ReadPartitions(b.ctx, driver.PartitionClaimParams{RelayID: "s", BatchSize: 100, MinLease: time.Second})
	require.NoError(t, err)
	require.Len(t, c2.Parts, 1)
	for i, p := range c.Parts {
		if p == c2.Parts[0] {
			require.Equal(t, c.Fences[i]+1, c2.Fences[0], "the fence went up with the new owner")
		}
	}
	require.Equal(t, []string{"b", "b"}, keysOf(c2))
	n, err = b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "s", Parts: c2.Parts, Fences: c2.Fences}, claimIDs(c2), driver.RetainProcessed)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
}

// Under block a dead event holds back the later events of its key, not the
// earlier ones (an event made pending again, such as a replay, before a dead
// one) and not another key's; a discarded one holds back nothing. Under skip
// nothing dead holds anything back.
func TestPartitionReadDeadEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, _, err := b.drv.BalancePartitions(b.ctx, driver.BalanceParams{RelayID: "r", Lease: time.Minute})
	require.NoError(t, err)
	// In one transaction, so in ID order: k1 pending, k2 dead, k3 pending;
	// l1 pending; m1 discarded, m2 pending.
	_, err = b.pool.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (event_type, aggregate_type, aggregate_id, payload, status, dead_letter_retries)
		VALUES ('k1', 'order', 'k', '{}', 'pending', 0), ('k2', 'order', 'k', '{}', 'failed', 0),
		       ('k3', 'order', 'k', '{}', 'pending', 0), ('l1', 'order', 'l', '{}', 'pending', 0),
		       ('m1', 'order', 'm', '{}', 'failed', $1), ('m2', 'order', 'm', '{}', 'pending', 0)`, driver.DiscardedRetries)
	require.NoError(t, err)
	read := func(skip bool) []string {
		c, err := b.drv.ReadPartitions(b.ctx, driver.PartitionClaimParams{RelayID: "r", BatchSize: 100, MinLease: time.Second, Skip: skip})
		require.NoError(t, err)
		types := make([]string, len(c.Events))
		for i, e := range c.Events {
			types[i] = e.EventType
		}
		return types
	}
	var got []string
	// Other tests' open transactions hold the horizon back for a moment.
	testutil.WaitFor(t, 10*time.Second, "the events are below the horizon", func() bool {
		got = read(true)
		return len(got) > 0
	})
	require.Equal(t, []string{"k1", "k3", "l1", "m2"}, got, "skip: the dead event holds nothing back")
	require.Equal(t, []string{"k1", "l1", "m2"}, read(false), "block: only what comes after k's dead event waits")
}
