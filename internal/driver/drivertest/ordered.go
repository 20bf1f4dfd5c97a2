package drivertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/testutil"
)

// orderedTests are the per-aggregate ordering cases (RelayConfig.Ordering
// aggregate); on a harness with NoOrdering set only the refusal runs.
var orderedTests = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"OrderedClaimTakesRunsPerKey", testOrderedRuns},
	{"OrderedFailedHeadHoldsItsKey", testOrderedFailedHead},
	{"OrderedDiscardedHeadReleasesItsKey", testOrderedDiscardedHead},
	{"OrderedRelaysKeepKeyOrder", testOrderedRelays},
	{"OrderedClaimKeepsWithinByteBudget", testOrderedByteBudget},
}

// orderedClaimer returns the harness driver's ordered claimer, or skips the
// test with the harness's reason.
func (b bundle) orderedClaimer(t *testing.T, h Harness) driver.OrderedClaimer {
	t.Helper()
	if h.NoOrdering != "" {
		t.Skip(h.NoOrdering)
	}
	oc, ok := b.drv.(driver.OrderedClaimer)
	require.True(t, ok, "the driver has no ordered claim")
	require.NoError(t, oc.OrderingSupported())
	return oc
}

// writeKeyed commits one event per key, in one transaction.
func (b bundle) writeKeyed(t *testing.T, keys ...string) []int64 {
	t.Helper()
	msgs := make([]outbox.Message, len(keys))
	for i, k := range keys {
		msgs[i] = outbox.Message{EventType: "e", AggregateType: "order", AggregateID: k, Payload: i}
	}
	return b.write(t, msgs...).IDs
}

// claimOrdered claims once; an empty claim is what the caller expects.
func claimOrdered(t *testing.T, b bundle, oc driver.OrderedClaimer, n int, skip bool) driver.Claim {
	t.Helper()
	c, err := oc.ClaimOrdered(b.ctx, driver.OrderedClaimParams{RelayID: "r", BatchSize: n, Lease: time.Minute, Skip: skip})
	require.NoError(t, err)
	return c
}

// claimOrderedSome claims until the claim returns events: on PostgreSQL a
// transaction another test keeps open anywhere on the server holds ordered
// claims back until it ends.
func claimOrderedSome(t *testing.T, b bundle, oc driver.OrderedClaimer, n int, skip bool) driver.Claim {
	t.Helper()
	var c driver.Claim
	testutil.WaitFor(t, 10*time.Second, "an ordered claim returns events", func() bool {
		c = claimOrdered(t, b, oc, n, skip)
		return len(c.Events) > 0
	})
	return c
}

func aggregateIDs(c driver.Claim) []string {
	out := make([]string, len(c.Events))
	for i, e := range c.Events {
		out[i] = e.AggregateID
	}
	return out
}

// testOrderingRefused: where ordering is not supported, the driver says so
// and a relay asked for it refuses to start.
func testOrderingRefused(t *testing.T, h Harness) {
	b := setup(t, h)
	if oc, ok := b.drv.(driver.OrderedClaimer); ok {
		require.ErrorIs(t, oc.OrderingSupported(), driver.ErrOrderingUnsupported)
		_, err := oc.ClaimOrdered(b.ctx, driver.OrderedClaimParams{RelayID: "r", BatchSize: 1, Lease: time.Minute})
		require.ErrorIs(t, err, driver.ErrOrderingUnsupported)
	}
	_, err := b.mgr.BlockedAggregates(b.ctx, outbox.OrderedFailureBlock, 10)
	require.ErrorIs(t, err, outbox.ErrOrderingUnsupported)
	r, err := outbox.NewRelay(b.db.Database, outbox.RelayConfig{Schema: b.db.Schema, Sink: outbox.SinkFunc(nil), Ordering: outbox.OrderingAggregate})
	require.NoError(t, err)
	err = r.Start(b.ctx)
	require.ErrorContains(t, err, "not supported by this database driver")
}

// A claim takes every key's events from its head on, in order; another
// claim gets nothing of a key while the first holds its head; a batch cut
// short is a prefix of each key.
func testOrderedRuns(t *testing.T, h Harness) {
	b := setup(t, h)
	oc := b.orderedClaimer(t, h)
	b.writeKeyed(t, "a", "b", "a", "", "b", "a")
	c := claimOrderedSome(t, b, oc, 100, false)
	require.Equal(t, []string{"a", "a", "a", "b", "b", ""}, aggregateIDs(c))
	ids := claimIDs(c)
	require.Less(t, ids[0], ids[1])
	require.Less(t, ids[1], ids[2])

	b.writeKeyed(t, "a", "c")
	require.Equal(t, []string{"c"}, aggregateIDs(claimOrderedSome(t, b, oc, 100, false)), "a is in flight")

	b.writeKeyed(t, "d", "d", "d")
	require.Equal(t, []string{"d", "d"}, aggregateIDs(claimOrderedSome(t, b, oc, 2, false)))
	require.Empty(t, claimOrdered(t, b, oc, 2, false).Events, "d's head is in flight")

	// A head whose lease expired before (a suspect) is claimed alone.
	b.writeKeyed(t, "e", "e")
	b.db.Exec(t, `UPDATE `+b.db.Table+` SET lease_expiries = 1 WHERE aggregate_id = 'e' AND status = 'pending'`)
	require.Equal(t, []string{"e"}, aggregateIDs(claimOrderedSome(t, b, oc, 100, false)))
}

// With a byte budget the ordered batch is cut as a prefix of its publish
// order: each key keeps a prefix of its run, in order; the first event is
// taken even alone over the budget.
func testOrderedByteBudget(t *testing.T, h Harness) {
	b := setup(t, h)
	oc := b.orderedClaimer(t, h)
	msgs := make([]outbox.Message, 6)
	for i := range msgs {
		// About 1 KB each: keys a, a, a, b, b, b.
		msgs[i] = outbox.Message{EventType: "e", AggregateType: "order", AggregateID: string(rune('a' + i/3)), Payload: strings.Repeat(fmt.Sprint(i), 1000)}
	}
	ids := b.write(t, msgs...).IDs
	claim := func(maxBytes int64) []int64 {
		t.Helper()
		var c driver.Claim
		testutil.WaitFor(t, 10*time.Second, "an ordered claim returns events", func() bool {
			var err error
			c, err = oc.ClaimOrdered(b.ctx, driver.OrderedClaimParams{RelayID: "r", BatchSize: 100, Lease: time.Minute, MaxBytes: maxBytes})
			require.NoError(t, err)
			return len(c.Events) > 0
		})
		return claimIDs(c)
	}
	require.Equal(t, ids[:2], claim(2500), "a's head and the next: a prefix of a's run")
	require.Equal(t, ids[3:4], claim(1), "b's head alone over the budget; a's third waits for its key")
	c, err := oc.ClaimOrdered(b.ctx, driver.OrderedClaimParams{RelayID: "r", BatchSize: 100, Lease: time.Minute, MaxBytes: 1 << 20})
	require.NoError(t, err)
	require.Empty(t, c.Events, "both keys in flight")
}

// A head in backoff, or dead under the block policy, holds its key's later
// events; other keys flow; BlockedAggregates reports the key. Skip lets the
// key go on once the head is dead.
func testOrderedFailedHead(t *testing.T, h Harness) {
	b := setup(t, h)
	oc := b.orderedClaimer(t, h)
	b.writeKeyed(t, "a", "a", "b")
	c := claimOrderedSome(t, b, oc, 1, false)
	require.Equal(t, []string{"a"}, aggregateIDs(c))
	head := c.Events[0].ID
	f := driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}
	_, err := b.drv.MarkFailed(b.ctx, f, 5, []driver.Failure{{ID: head, Error: "x", Delay: time.Hour}})
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, aggregateIDs(claimOrderedSome(t, b, oc, 100, false)), "a waits for its head's retry")

	blocked, err := b.mgr.BlockedAggregates(b.ctx, outbox.OrderedFailureBlock, 10)
	require.NoError(t, err)
	require.Equal(t, outbox.BlockedAggregates{Total: 1, Aggregates: []outbox.BlockedAggregate{
		{AggregateType: "order", AggregateID: "a", HeadID: head, HeadStatus: "pending", Waiting: 1}}}, blocked)

	b.db.Exec(t, fmt.Sprintf(`UPDATE %s SET status = 'failed' WHERE id = %d`, b.db.Table, head))
	require.Empty(t, claimOrdered(t, b, oc, 100, false).Events, "block: a dead head holds its key")
	blocked, err = b.mgr.BlockedAggregates(b.ctx, outbox.OrderedFailureBlock, 10)
	require.NoError(t, err)
	require.Equal(t, []outbox.BlockedAggregate{{AggregateType: "order", AggregateID: "a", HeadID: head, HeadStatus: "failed", Waiting: 1}}, blocked.Aggregates)
	blocked, err = b.mgr.BlockedAggregates(b.ctx, outbox.OrderedFailureSkip, 10)
	require.NoError(t, err)
	require.Zero(t, blocked.Total, "skip: a dead head blocks nothing")
	require.Equal(t, []string{"a"}, aggregateIDs(claimOrderedSome(t, b, oc, 100, true)), "skip: a dead head lets its key go on")
}

// An operator who discards the head (pending in backoff, or dead) lets the
// key go on under the block policy; retrying a dead head puts it first
// again.
func testOrderedDiscardedHead(t *testing.T, h Harness) {
	b := setup(t, h)
	oc := b.orderedClaimer(t, h)
	ids := b.writeKeyed(t, "a", "a", "a")
	c := claimOrderedSome(t, b, oc, 1, false)
	require.Equal(t, []int64{ids[0]}, claimIDs(c))
	_, err := b.drv.MarkFailed(b.ctx, driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}, 5,
		[]driver.Failure{{ID: ids[0], Error: "x", Delay: time.Hour}})
	require.NoError(t, err)
	require.Empty(t, claimOrdered(t, b, oc, 100, false).Events)
	got, err := b.drv.Discard(b.ctx, []int64{ids[0]}, "operator")
	require.NoError(t, err)
	require.Equal(t, []int64{ids[0]}, got)
	c = claimOrderedSome(t, b, oc, 1, false)
	require.Equal(t, []int64{ids[1]}, claimIDs(c), "the discarded head holds nothing back")

	// The second dies; discarding the dead head releases the third.
	_, err = b.drv.MarkFailed(b.ctx, driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}, 5,
		[]driver.Failure{{ID: ids[1], Error: "x", Permanent: true}})
	require.NoError(t, err)
	require.Empty(t, claimOrdered(t, b, oc, 100, false).Events, "a dead head holds its key")
	got, err = b.drv.Discard(b.ctx, []int64{ids[1]}, "operator")
	require.NoError(t, err)
	require.Equal(t, []int64{ids[1]}, got, "a dead-lettered event can be discarded")
	require.Equal(t, driver.StatusFailed, b.get(t, ids[1]).Status)
	require.Equal(t, []int64{ids[2]}, claimIDs(claimOrderedSome(t, b, oc, 100, false)))
}

// orderedSink fails a tenth of the events at random (as a flaky endpoint
// would, and, as the key-order contract asks, sends nothing of a key after
// one of its events failed in the call) and records first acknowledgements.
type orderedSink struct {
	mu    sync.Mutex
	acked map[int64]bool
	first map[string][]int64 // per aggregate, IDs in first-ack order
}

func (s *orderedSink) Publish(ctx context.Context, events []outbox.Event) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := make([]error, len(events))
	failed := map[string]bool{}
	for i, e := range events {
		switch {
		case !outbox.KeyOrdered(ctx):
			errs[i] = errors.New("not asked for key order")
		case failed[e.AggregateID]:
			errs[i] = outbox.ErrEarlierEventFailed
		case rand.IntN(10) == 0:
			errs[i], failed[e.AggregateID] = errors.New("flaky"), true
		case !s.acked[e.ID]:
			s.acked[e.ID] = true
			s.first[e.AggregateID] = append(s.first[e.AggregateID], e.ID)
		}
	}
	return errs
}

// Three ordered relays drain keys written one transaction after another
// (some transactions hold several events of a key, some roll back) through
// a flaky sink: every committed event is acknowledged, and per key the
// first acknowledgements follow the IDs, which are commit order here (one
// writer per key).
func testOrderedRelays(t *testing.T, h Harness) {
	b := setup(t, h)
	b.orderedClaimer(t, h)
	sink := &orderedSink{acked: map[int64]bool{}, first: map[string][]int64{}}
	for i := range 3 {
		db := b.db.Database
		if b.db.Reopen != nil {
			db = b.db.Reopen(t)
		}
		startRelay(t, db, b.db.Schema, outbox.RelayConfig{
			Sink: sink, RelayID: fmt.Sprint("relay-", i), BatchSize: 10, Workers: 2, Lease: 10 * time.Second,
			MaxAttempts: 1000, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond,
			Ordering: outbox.OrderingAggregate, PgBouncer: h.Pooled,
		})
	}
	var (
		mu   sync.Mutex
		want = map[string][]int64{}
		wg   sync.WaitGroup
	)
	for w := range 4 {
		wg.Go(func() {
			for txn := range 12 {
				key := fmt.Sprint("k", w, "-", txn%3)
				msgs := []outbox.Message{{EventType: "e", AggregateType: "order", AggregateID: key, Payload: txn}}
				if txn%2 == 0 {
					msgs = append(msgs, outbox.Message{EventType: "e", AggregateType: "order", AggregateID: key, Payload: txn})
				}
				tx, err := b.db.Begin(b.ctx)
				if err != nil {
					t.Error(err)
					return
				}
				res, err := tx.Write(b.ctx, b.writer, msgs...)
				if err == nil && txn%5 == 4 {
					err = tx.Rollback(b.ctx)
					res = outbox.WriteResult{}
				} else if err == nil {
					err = tx.Commit(b.ctx)
				} else {
					_ = tx.Rollback(b.ctx)
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				want[key] = append(want[key], res.IDs...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	total := 0
	for _, ids := range want {
		total += len(ids)
	}
	testutil.WaitFor(t, 30*time.Second, "every committed event acknowledged", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return len(sink.acked) >= total
	})
	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.Len(t, sink.acked, total, "no ghost")
	for key, ids := range want {
		require.Equal(t, ids, sink.first[key], "key %s: first acknowledgements in commit order", key)
	}
}
