package pgdriver_test

import (
	"crypto/sha512"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
)

// The partition read (also when it records its batch in flight) and its
// mark stay on the indexes under a generic plan, on a table with processed
// rows, a backlog, events scheduled ahead and a dead-letter queue: the
// partition index for a partition's events, the primary key for the mark;
// no sequential scan of the outbox table; one probe of the delayed events
// by key per event read, never every event not yet due read whole; and
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
	_, err = b.pool.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (event_type, aggregate_type, aggregate_id, payload, available_at)
		SELECT 'e', 'reminder', g::text, '{}', now() + interval '1 day' FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `ANALYZE `+b.drv.Table())
	require.NoError(t, err)
	res, err := b.drv.BalancePartitions(b.ctx, driver.BalanceParams{RelayID: "r", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, [2]int{driver.Partitions, 1}, [2]int{res.Held, res.Relays})

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
	plan := explain("read_plan", read, "int, text, bigint, int[], int, bigint, int", `1000, 'r', 30000, '{}', 0, 0, 32`)
	require.Contains(t, plan, "outbox_events_partition_idx", plan)
	require.Contains(t, plan, "outbox_events_dead_key_idx", plan, "a dead head is found by its key")
	require.NotContains(t, plan, "outbox_events_failed_idx", plan, "the dead-letter queue is not read whole")
	require.Contains(t, plan, "outbox_events_key_delayed_idx", plan, "an event not due before it is found by its key")
	require.NotContains(t, plan, "outbox_events_pending_idx", plan, "the events scheduled ahead are not read whole")
	require.Regexp(t, `Index Scan using outbox_events_partition_idx[^\n]*\n\s+Index Cond: [^\n]*available_at <= now\(\)`, plan,
		"the events not due are stepped over in the partition index (migration 12), their rows not fetched")
	plan = explain("read_record_plan", pgdriver.RecordingPartitionSQL(b.drv), "int, text, bigint, int[], int, bigint, int", `1000, 'r', 30000, '{}', 0, 0, 32`)
	require.Contains(t, plan, "outbox_events_partition_idx", plan, "recording its batch leaves the read's plan as it was")
	require.Contains(t, plan, "Update on outbox_partition_in_flight", plan)
	plan = explain("read_unordered_plan", pgdriver.UnorderedPartitionSQL(b.drv), "int, text, bigint, int[], int, bigint, int", `1000, 'r', 30000, '{}', 0, 0, 32`)
	require.Regexp(t, `Index Scan using outbox_events_partition_idx[^\n]*\n\s+Index Cond: [^\n]*available_at <= now\(\)`, plan)
	require.NotContains(t, plan, "outbox_events_key_delayed_idx", plan, "an unordered read probes no key")
	require.NotContains(t, plan, "outbox_events_dead_key_idx", plan, "an unordered read probes no key")
	plan = explain("mark_plan", mark, "bigint[], text, int[], bigint[]", `'{1,2,3}', 'r', '{1,2}', '{1,1}'`)
	require.Contains(t, plan, "outbox_events_pkey", plan)
	require.NotContains(t, plan, "outbox_events_partition_idx", plan, "a mark reads its rows by ID, not the partition's backlog")
}

// PerPartition bounds what a read (one that records its batch in flight)
// takes from each partition: the oldest events of each, in key order, and
// Capped lists the partitions that gave that many (they may hold more);
// without it a read takes a batch from as few partitions as it can. Cut
// says the byte budget cut the batch.
func TestPartitionReadTakesAtMostPerPartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.drv.BalancePartitions(b.ctx, driver.BalanceParams{RelayID: "r", Lease: time.Minute})
	require.NoError(t, err)
	var keys []string
	for round := range 4 {
		for k := range 30 {
			if round < 3 || k%2 == 0 { // 15 keys with 4 events, 15 with 3
				keys = append(keys, fmt.Sprint("k", k))
			}
		}
	}
	b.insertKeyed(t, keys...)
	rows, err := b.pool.Query(b.ctx, `SELECT id, (hashtext(coalesce(aggregate_type, '') || ':' || coalesce(aggregate_id, id::text)) & 255)::int
		FROM `+b.drv.Table()+` ORDER BY txid, id`)
	require.NoError(t, err)
	partOf := map[int64]int32{}
	backlog := map[int32][]int64{} // each partition's events in key order
	for rows.Next() {
		var id int64
		var part int32
		require.NoError(t, rows.Scan(&id, &part))
		partOf[id] = part
		backlog[part] = append(backlog[part], id)
	}
	require.NoError(t, rows.Err())
	require.Greater(t, len(backlog), 10, "the keys fall into many partitions")

	read := func(perPart int, maxBytes int64) driver.Claim {
		var c driver.Claim
		// Other tests' open transactions hold the horizon back for a moment.
		testutil.WaitFor(t, 10*time.Second, "the events are below the horizon", func() bool {
			c, err = b.drv.ReadPartitions(b.ctx, driver.PartitionClaimParams{RelayID: "r", BatchSize: 40,
				PerPartition: perPart, MaxBytes: maxBytes, MinLease: time.Second, RecordInFlight: true})
			require.NoError(t, err)
			return len(c.Events) > 0
		})
		return c
	}
	c := read(3, 0)
	require.Len(t, c.Events, 40)
	require.False(t, c.Cut)
	got := map[int32][]int64{}
	for _, e := range c.Events {
		got[partOf[e.ID]] = append(got[partOf[e.ID]], e.ID)
	}
	var capped []int32
	for part, ids := range got {
		require.LessOrEqual(t, len(ids), 3, "partition %d", part)
		require.Equal(t, backlog[part][:len(ids)], ids, "partition %d gives its oldest events in key order", part)
		if len(ids) == 3 {
			capped = append(capped, part)
		}
	}
	require.NotEmpty(t, capped)
	require.ElementsMatch(t, capped, c.Capped)
	require.ElementsMatch(t, slices.Collect(maps.Keys(got)), c.Parts)

	c = read(0, 0)
	require.Len(t, c.Events, 40)
	require.Empty(t, c.Capped, "no limit, nothing capped")
	require.Less(t, len(c.Parts), len(got), "without a limit a batch comes from fewer partitions")

	c = read(3, 1)
	require.Len(t, c.Events, 1, "the byte budget keeps the first event only")
	require.True(t, c.Cut, "and the read says it cut the batch")
}

// A read writes nothing and keeps a key's order behind what blocks it: a
// retrying head holds its key's later events back while the other keys of
// the partition flow; a mark under a fence that no longer holds (the
// partition changed hands) changes nothing.
func TestPartitionReadAndFencedMark(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.drv.BalancePartitions(b.ctx, driver.BalanceParams{RelayID: "r", Lease: time.Minute})
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
	_, err = b.drv.BalancePartitions(b.ctx, driver.BalanceParams{RelayID: "s", Lease: time.Minute})
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
	_, err := b.drv.BalancePartitions(b.ctx, driver.BalanceParams{RelayID: "r", Lease: time.Minute})
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

// olderTransaction begins a transaction that holds a transaction ID until
// it is committed (or the test ends): the horizon of the ordered reads stays
// below every event committed after it began.
func olderTransaction(t *testing.T, b bundle) pgx.Tx {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(b.ctx) })
	_, err = tx.Exec(b.ctx, `SELECT pg_current_xact_id()`)
	require.NoError(t, err)
	return tx
}

// A read that finds no event says whether the horizon held committed
// events of its partitions back (an older transaction still ran), so that
// the relay reads again soon; once the older transaction ended, the held
// event is read.
func TestPartitionReadReportsHeldEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.drv.BalancePartitions(b.ctx, driver.BalanceParams{RelayID: "r", Lease: time.Minute})
	require.NoError(t, err)
	read := func() driver.Claim {
		c, err := b.drv.ReadPartitions(b.ctx, driver.PartitionClaimParams{RelayID: "r", BatchSize: 100, MinLease: time.Second})
		require.NoError(t, err)
		return c
	}
	c := read()
	require.Empty(t, c.Events)
	require.False(t, c.Held, "nothing to hold back")

	// An older transaction runs while a younger one commits k's event.
	older := olderTransaction(t, b)
	b.insertKeyed(t, "k")
	c = read()
	require.Empty(t, c.Events, "k waits for the older transaction")
	require.True(t, c.Held, "the read says k was held back")
	// Another relay's partitions are not this relay's concern.
	c2, err := b.drv.ReadPartitions(b.ctx, driver.PartitionClaimParams{RelayID: "s", BatchSize: 100, MinLease: time.Second})
	require.NoError(t, err)
	require.False(t, c2.Held, "a relay without partitions holds nothing back")

	require.NoError(t, older.Commit(b.ctx))
	// Other tests' open transactions hold the horizon back for a moment.
	testutil.WaitFor(t, 10*time.Second, "k is below the horizon", func() bool {
		c = read()
		return len(c.Events) == 1
	})
	require.Equal(t, []string{"k"}, keysOf(c))
	n, err := b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "r", Parts: c.Parts, Fences: c.Fences}, claimIDs(c), driver.RetainProcessed)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	// An event left out for another reason (an event of its key before it
	// is not due) is not held back by the horizon once below it.
	_, err = b.pool.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (event_type, aggregate_type, aggregate_id, payload, available_at)
		VALUES ('d1', 'order', 'd', '{}', now() + interval '1 hour'), ('d2', 'order', 'd', '{}', now())`)
	require.NoError(t, err)
	testutil.WaitFor(t, 10*time.Second, "d2 is below the horizon", func() bool {
		c = read()
		require.Empty(t, c.Events, "d2 waits behind d1")
		return !c.Held
	})
}

// An event not due yet (written for later, or retrying) holds back the
// later events of its key, not the earlier ones and not another key's; an
// event written with a time already past is due; once the event falls
// due, it and what waited behind it are read in order.
func TestPartitionReadScheduledEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.drv.BalancePartitions(b.ctx, driver.BalanceParams{RelayID: "r", Lease: time.Minute})
	require.NoError(t, err)
	// In one transaction, so in ID order: k1 due, k2 in an hour, k3 due;
	// l1 due a second ago, l2 due; m1 in an hour, m2 due.
	_, err = b.pool.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (event_type, aggregate_type, aggregate_id, payload, available_at)
		VALUES ('k1', 'order', 'k', '{}', now()), ('k2', 'order', 'k', '{}', now() + interval '1 hour'),
		       ('k3', 'order', 'k', '{}', now()), ('l1', 'order', 'l', '{}', now() - interval '1 second'),
		       ('l2', 'order', 'l', '{}', now()), ('m1', 'order', 'm', '{}', now() + interval '1 hour'),
		       ('m2', 'order', 'm', '{}', now())`)
	require.NoError(t, err)
	read := func() []string {
		c, err := b.drv.ReadPartitions(b.ctx, driver.PartitionClaimParams{RelayID: "r", BatchSize: 100, MinLease: time.Second})
		require.NoError(t, err)
		types := make([]string, len(c.Events))
		for i, e := range c.Events {
			types[i] = e.EventType
		}
		slices.Sort(types)
		return types
	}
	var got []string
	// Other tests' open transactions hold the horizon back for a moment.
	testutil.WaitFor(t, 10*time.Second, "the events are below the horizon", func() bool {
		got = read()
		return len(got) > 0
	})
	require.Equal(t, []string{"k1", "l1", "l2"}, got, "k waits behind k2, m behind m1")
	_, err = b.pool.Exec(b.ctx, `UPDATE `+b.drv.Table()+` SET available_at = now() WHERE event_type IN ('k2', 'm1')`)
	require.NoError(t, err)
	require.Equal(t, []string{"k1", "k2", "k3", "l1", "l2", "m1", "m2"}, read(), "due now: read in order")
}

// The read of a relay that keeps no order takes every due pending event of
// its partitions at once: an event committed while an older transaction
// still runs (no horizon), and the events of a key behind one of its own
// that is retrying, dead-lettered or in flight under a row lease, but not
// those themselves.
func TestPartitionReadUnordered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.drv.BalancePartitions(b.ctx, driver.BalanceParams{RelayID: "r", Lease: time.Minute})
	require.NoError(t, err)
	older := olderTransaction(t, b)
	// In one transaction, so in ID order, committed after older began.
	_, err = b.pool.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (event_type, aggregate_type, aggregate_id, payload, status, available_at, locked_until)
		VALUES ('k1', 'order', 'k', '{}', 'pending', now() + interval '1 hour', NULL), ('k2', 'order', 'k', '{}', 'pending', now(), NULL),
		       ('l1', 'order', 'l', '{}', 'failed', now(), NULL), ('l2', 'order', 'l', '{}', 'pending', now(), NULL),
		       ('m1', 'order', 'm', '{}', 'processing', now(), now() + interval '1 hour'), ('m2', 'order', 'm', '{}', 'pending', now(), NULL)`)
	require.NoError(t, err)
	read := func(unordered bool) (driver.Claim, []string) {
		c, err := b.drv.ReadPartitions(b.ctx, driver.PartitionClaimParams{RelayID: "r", BatchSize: 100, MinLease: time.Second,
			Unordered: unordered, RecordInFlight: true})
		require.NoError(t, err)
		types := make([]string, len(c.Events))
		for i, e := range c.Events {
			types[i] = e.EventType
		}
		slices.Sort(types)
		return c, types
	}
	c, types := read(false)
	require.Empty(t, types, "an ordered read waits for the older transaction")
	require.True(t, c.Held)
	c, types = read(true)
	require.Equal(t, []string{"k2", "l2", "m2"}, types, "read at once, none held back by its key")
	require.False(t, c.Held)
	// The horizon is the cluster's: other tests' ordered reads wait for it.
	require.NoError(t, older.Rollback(b.ctx))
	n, err := b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "r", Parts: c.Parts, Fences: c.Fences, InFlight: c.InFlight},
		claimIDs(c), driver.RetainProcessed)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	c, types = read(true)
	require.Empty(t, types, "the rest is not due, dead or under a row lease")
	require.False(t, c.Held, "an unordered read has no horizon to hold anything back")
}

// A read records its batch on its partitions before the events go out;
// a relay that takes the partitions over after the owner's lease ran out
// (the owner died or hung) counts an attempt of each recorded event still
// pending and unchanged, as the rescue of an expired row lease does,
// dead-letters one out of attempts, and reads a suspect alone. An event
// whose publish failed meanwhile is not counted twice; a released batch
// is not counted at all.
func TestPartitionTakeoverRescuesInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	parts := pgx.Identifier{b.drv.Schema(), "outbox_partitions"}.Sanitize()
	balance := func(relay string) driver.BalanceResult {
		t.Helper()
		res, err := b.drv.BalancePartitions(b.ctx, driver.BalanceParams{RelayID: relay, Lease: time.Minute,
			RescueInFlight: true, MaxAttempts: 5})
		require.NoError(t, err)
		return res
	}
	read := func(relay string) driver.Claim {
		t.Helper()
		c, err := b.drv.ReadPartitions(b.ctx, driver.PartitionClaimParams{RelayID: relay, BatchSize: 100,
			MinLease: time.Second, RecordInFlight: true})
		require.NoError(t, err)
		return c
	}
	// The relays die: their partitions' leases and their share-out rows
	// run out.
	expire := func() {
		t.Helper()
		_, err := b.pool.Exec(b.ctx, `UPDATE `+parts+` SET lease_until = now() - interval '1 second'`)
		require.NoError(t, err)
		_, err = b.pool.Exec(b.ctx, `UPDATE `+pgx.Identifier{b.drv.Schema(), "outbox_partition_relays"}.Sanitize()+` SET expires_at = now() - interval '1 second'`)
		require.NoError(t, err)
	}
	recorded := func() []int64 {
		t.Helper()
		// The records that still count: those under the partition's fence.
		rows, err := b.pool.Query(b.ctx, `SELECT i FROM `+inFlightTable(b)+` r
			JOIN `+parts+` p ON p.partition = r.partition AND p.owner = r.owner AND p.fence = r.fence, unnest(r.ids) i ORDER BY i`)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		return ids
	}

	require.Zero(t, balance("r").Rescue.Rescued)
	b.insertKeyed(t, "a", "b", "c")
	var c driver.Claim
	testutil.WaitFor(t, 10*time.Second, "the events are below the horizon", func() bool {
		c = read("r")
		return len(c.Events) == 3
	})
	require.True(t, c.InFlight)
	require.Equal(t, claimIDs(c), recorded())
	a, bb, cc := c.Events[0], c.Events[1], c.Events[2]
	require.Equal(t, []string{"a", "b", "c"}, keysOf(c))
	f := driver.Fence{RelayID: "r", Parts: c.Parts, Fences: c.Fences, InFlight: true}
	// c's publish failed (its attempt counted there); b has one attempt.
	_, err := b.drv.MarkFailed(b.ctx, f, 10, []driver.Failure{{ID: cc.ID, Error: "sink down", Delay: time.Hour}})
	require.NoError(t, err)
	b.exec(t, `UPDATE `+b.drv.Table()+` SET max_attempts = 1 WHERE id = $1`, bb.ID)

	// r dies with the batch in flight; s takes its partitions over.
	expire()
	res := balance("s")
	require.Equal(t, []int64{a.ID}, res.Rescue.Rescued)
	require.Len(t, res.Rescue.Dead, 1)
	require.Equal(t, bb.ID, res.Rescue.Dead[0].ID)
	require.Equal(t, driver.StatusFailed, res.Rescue.Dead[0].Status)
	require.Contains(t, res.Rescue.Dead[0].LastError, "lease expired while held by relay r (dead-lettered after 1 attempts, 1 of them ending in a lease expiry")
	require.Empty(t, recorded(), "a takeover raises the fence: the record no longer counts")
	got := func(id int64) driver.Event {
		e, err := b.drv.GetEvent(b.ctx, id)
		require.NoError(t, err)
		return e
	}
	require.Equal(t, [3]any{driver.StatusPending, 1, 1}, [3]any{got(a.ID).Status, got(a.ID).Attempts, got(a.ID).LeaseExpiries})
	require.Equal(t, "lease expired while held by relay r", got(a.ID).LastError)
	require.Equal(t, [2]int{1, 0}, [2]int{got(cc.ID).Attempts, got(cc.ID).LeaseExpiries}, "a failed publish is not counted again")
	require.Zero(t, balance("s").Rescue.Rescued, "counted once")

	// a is a suspect: it goes alone, ahead of what came after it, and the
	// record holds only what goes.
	b.insertKeyed(t, "d", "e")
	b.waitBelowHorizon(t)
	c = read("s")
	require.Equal(t, []int64{a.ID}, claimIDs(c), "the suspect goes alone")
	require.Equal(t, []int64{a.ID}, recorded())
	n, err := b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "s", Parts: c.Parts, Fences: c.Fences, InFlight: true}, claimIDs(c), driver.RetainProcessed)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	testutil.WaitFor(t, 10*time.Second, "the others go together again", func() bool {
		c = read("s")
		return len(c.Events) == 2
	})
	require.Equal(t, []string{"d", "e"}, keysOf(c))

	// Handed back unpublished: a takeover counts nothing.
	released, err := b.drv.Release(b.ctx, driver.Fence{RelayID: "s", Parts: c.Parts, Fences: c.Fences, InFlight: true}, claimIDs(c))
	require.NoError(t, err)
	require.EqualValues(t, 2, released)
	require.NotContains(t, recorded(), c.Events[0].ID)
	require.NotContains(t, recorded(), c.Events[1].ID)
	expire()
	require.Empty(t, balance("r").Rescue.Rescued)
	require.Zero(t, got(c.Events[0].ID).Attempts)
}

// A read keeps within the byte budget (stored bytes): the first event
// always, then a prefix in key order, and it records only what goes.
func TestPartitionReadKeepsWithinByteBudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.drv.BalancePartitions(b.ctx, driver.BalanceParams{RelayID: "r", Lease: time.Minute})
	require.NoError(t, err)
	events := make([]driver.NewEvent, 4)
	for i := range events {
		// About 1 KB each of hex digests: stored as written, uncompressed.
		var pad []byte
		for len(pad) < 1000 {
			sum := sha512.Sum512(append(pad, byte(i)))
			pad = fmt.Appendf(pad, "%x", sum[:])
		}
		events[i] = driver.NewEvent{EventType: "e", AggregateType: "order", AggregateID: string(rune('a' + i)),
			Payload: []byte(`{"pad": "` + string(pad[:1000]) + `"}`), Headers: []byte(`{}`)}
	}
	b.insertEvents(t, events)
	read := func(maxBytes int64) driver.Claim {
		t.Helper()
		var c driver.Claim
		testutil.WaitFor(t, 10*time.Second, "the events are below the horizon", func() bool {
			var err error
			c, err = b.drv.ReadPartitions(b.ctx, driver.PartitionClaimParams{RelayID: "r", BatchSize: 100,
				MinLease: time.Second, MaxBytes: maxBytes, RecordInFlight: true})
			require.NoError(t, err)
			return len(c.Events) > 0
		})
		return c
	}
	c := read(2500)
	require.Equal(t, []string{"a", "b"}, keysOf(c), "a prefix in key order within 2,500 bytes")
	var recorded []int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT coalesce(array_agg(i ORDER BY i), '{}') FROM `+
		inFlightTable(b)+` r, unnest(r.ids) i`).Scan(&recorded))
	require.Equal(t, claimIDs(c), recorded, "only what goes is recorded")
	_, err = b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "r", Parts: c.Parts, Fences: c.Fences}, claimIDs(c), driver.RetainDelete)
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, keysOf(read(1)), "the first alone over the budget")
}

// A read that records its batch races a takeover safely: a read that
// reaches a partition while another relay is taking it over (its balance
// round holds the row) waits for the round, then neither records nor
// returns that partition's events, which go to the new owner unsent.
func TestPartitionRecordingReadWaitsForATakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	parts := pgx.Identifier{b.drv.Schema(), "outbox_partitions"}.Sanitize()
	_, err := b.drv.BalancePartitions(b.ctx, driver.BalanceParams{RelayID: "r", Lease: time.Minute})
	require.NoError(t, err)
	b.insertKeyed(t, "a", "b", "c")
	b.waitBelowHorizon(t)

	// Another relay's round is taking every partition over, uncommitted.
	takeover, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = takeover.Rollback(b.ctx) }()
	_, err = takeover.Exec(b.ctx, `SELECT partition FROM `+parts+` ORDER BY partition FOR UPDATE`)
	require.NoError(t, err)

	read := make(chan driver.Claim, 1)
	go func() {
		c, err := b.drv.ReadPartitions(b.ctx, driver.PartitionClaimParams{RelayID: "r", BatchSize: 100,
			MinLease: time.Second, RecordInFlight: true})
		assert.NoError(t, err)
		read <- c
	}()
	testutil.WaitFor(t, 10*time.Second, "the read waits for the round", func() bool {
		var waiting bool
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0 AND strpos(query, 'WITH horizon') > 0)`,
			b.drv.Schema()).Scan(&waiting))
		return waiting
	})
	_, err = takeover.Exec(b.ctx, `UPDATE `+parts+` SET owner = 's', fence = fence + 1`)
	require.NoError(t, err)
	require.NoError(t, takeover.Commit(b.ctx))

	c := <-read
	require.Empty(t, c.Events, "the partitions changed hands during the read")
	var records int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+inFlightTable(b)+
		` WHERE ids IS NOT NULL`).Scan(&records))
	require.Zero(t, records, "nothing recorded for partitions the relay lost")
}

// A relay that died and came back under the same relay ID within a lease
// finds its partitions still its own: its first round takes over what it
// had recorded in flight, as another relay's takeover would.
func TestPartitionRestartRescuesInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	balance := func(restart bool) driver.BalanceResult {
		t.Helper()
		res, err := b.drv.BalancePartitions(b.ctx, driver.BalanceParams{RelayID: "r", Lease: time.Minute,
			RescueInFlight: true, MaxAttempts: 5, Restart: restart})
		require.NoError(t, err)
		return res
	}
	balance(true)
	b.insertKeyed(t, "a", "b")
	var c driver.Claim
	testutil.WaitFor(t, 10*time.Second, "the events are below the horizon", func() bool {
		c, _ = b.drv.ReadPartitions(b.ctx, driver.PartitionClaimParams{RelayID: "r", BatchSize: 100,
			MinLease: time.Second, RecordInFlight: true})
		return len(c.Events) == 2
	})
	require.Empty(t, balance(false).Rescue.Rescued, "a round of the running relay renews its own partitions")
	res := balance(true)
	require.Equal(t, claimIDs(c), res.Rescue.Rescued, "the restarted relay counts what it had in flight")
	require.Equal(t, driver.Partitions, res.Held)
	e, err := b.drv.GetEvent(b.ctx, c.Events[0].ID)
	require.NoError(t, err)
	require.Equal(t, [2]int{1, 1}, [2]int{e.Attempts, e.LeaseExpiries})
	require.Equal(t, "lease expired while held by relay r", e.LastError)
	n, err := b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "r", Parts: c.Parts, Fences: c.Fences}, claimIDs(c), driver.RetainProcessed)
	require.NoError(t, err)
	require.Zero(t, n, "the dead process's fence no longer holds")
	require.Empty(t, balance(true).Rescue.Rescued, "counted once")
}

// waitBelowHorizon waits until every event of the table is below the
// horizon, so that a partition read sees them.
func (b bundle) waitBelowHorizon(t *testing.T) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, "the events are below the horizon", func() bool {
		var below bool
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT bool_and(txid < pg_snapshot_xmin(pg_current_snapshot())) FROM `+b.drv.Table()).Scan(&below))
		return below
	})
}

// inFlightTable is the schema's table of in-flight records (migration 10).
func inFlightTable(b bundle) string {
	return pgx.Identifier{b.drv.Schema(), "outbox_partition_in_flight"}.Sanitize()
}
