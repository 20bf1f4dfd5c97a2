package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

// orderSink is a key-ordered sink for the relay's ordering tests: it
// checks that the relay asked for key order, fails what fail says, and
// (as the KeyOrdered contract asks) sends nothing of an aggregate after one
// of its events failed in the batch. It records every event handed to it
// (sent) and every acknowledgement, in order.
type orderSink struct {
	mu        sync.Mutex
	fail      func(outbox.Event) error
	sent      []outbox.Event
	acked     []outbox.Event
	unordered int // calls without WithKeyOrder
}

// orderSinkFailing is an orderSink that answers err for event id.
func orderSinkFailing(id int64, err error) *orderSink {
	s := &orderSink{}
	s.setFail(func(e outbox.Event) error {
		if e.ID == id {
			return err
		}
		return nil
	})
	return s
}

func (s *orderSink) setFail(f func(outbox.Event) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = f
}

func (s *orderSink) Publish(ctx context.Context, events []outbox.Event) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !outbox.KeyOrdered(ctx) {
		s.unordered++
	}
	errs := make([]error, len(events))
	failed := map[[2]string]bool{}
	for i, e := range events {
		key := [2]string{e.AggregateType, e.AggregateID}
		if failed[key] {
			errs[i] = outbox.ErrEarlierEventFailed
			continue
		}
		if err := ctx.Err(); err != nil {
			errs[i] = err
			failed[key] = true
			continue
		}
		s.sent = append(s.sent, e)
		if s.fail != nil {
			if errs[i] = s.fail(e); errs[i] != nil {
				failed[key] = true
				continue
			}
		}
		s.acked = append(s.acked, e)
	}
	return errs
}

// firstAcks returns, per aggregate ID, the IDs in the order of their first
// acknowledgement, and how many acknowledgements there were.
func (s *orderSink) firstAcks() (map[string][]int64, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[int64]bool{}
	out := map[string][]int64{}
	for _, e := range s.acked {
		if !seen[e.ID] {
			seen[e.ID] = true
			out[e.AggregateID] = append(out[e.AggregateID], e.ID)
		}
	}
	return out, len(seen)
}

func (s *orderSink) sentIDs() map[int64]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int64]bool{}
	for _, e := range s.sent {
		out[e.ID] = true
	}
	return out
}

// writeKeys writes rounds transactions, each with one event of every key
// k0..k(keys-1), and returns each key's IDs in commit order.
func (b relayBundle) writeKeys(t *testing.T, keys, rounds int) map[string][]int64 {
	t.Helper()
	out := map[string][]int64{}
	for range rounds {
		ids := b.write(t, keys, func(i int, m *outbox.Message) { m.AggregateID = fmt.Sprintf("k%d", i) })
		for i, id := range ids {
			k := fmt.Sprintf("k%d", i)
			out[k] = append(out[k], id)
		}
	}
	return out
}

// Head of line: a key whose third event keeps failing holds its later
// events pending and unsent while the other 49 keys finish; retrying the
// dead event by hand releases the key, in order. Two relays of two workers
// each serve the table, on owned partitions and (--leases rows) under the
// row-lease ordered claim.
func TestRelayOrderedHeadOfLineBlock(t *testing.T) {
	t.Parallel()
	forEachLeases(t, testRelayOrderedHeadOfLineBlock)
}

func testRelayOrderedHeadOfLineBlock(t *testing.T, leases outbox.Leases) {
	b := setupRelay(t)
	const keys, rounds = 50, 6
	want := b.writeKeys(t, keys, rounds)
	stuck := want["k7"][2]
	sink := orderSinkFailing(stuck, errors.New("refused"))
	cfg := outbox.RelayConfig{Sink: sink, Ordering: outbox.OrderingAggregate, Workers: 2, BatchSize: 16,
		MaxAttempts: 3, BackoffBase: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		Leases: leases}
	cfg.RelayID = "r1"
	b.start(t, cfg)
	cfg.RelayID = "r2"
	b.start(t, cfg)
	if leases == outbox.LeasesRows {
		require.Equal(t, map[string]int{"": 256}, b.owners(t), "no partition held under row leases")
	}

	// Processing must be 0 too: the stuck key's later events may have been
	// claimed in the head's batch, and go back to pending, unsent, just
	// after the head is marked dead.
	b.waitStats(t, "the other keys delivered, the stuck head dead", func(s outbox.Stats) bool {
		return s.Processed == keys*rounds-(rounds-2) && s.Failed == 1 && s.Processing == 0
	})
	s := b.stats(t)
	require.EqualValues(t, rounds-3, s.Pending, "the stuck key's later events wait")
	for _, id := range want["k7"][3:] {
		require.False(t, sink.sentIDs()[id], "event %d of the stuck key was sent", id)
		e, err := b.mgr.Event(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, outbox.StatusPending, e.Status)
		require.Zero(t, e.Attempts, "no attempt spent on a waiting event")
	}

	blocked, err := b.mgr.BlockedAggregates(b.ctx, outbox.OrderedFailureBlock, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, blocked.Total)
	require.Equal(t, "k7", blocked.Aggregates[0].AggregateID)
	require.Equal(t, stuck, blocked.Aggregates[0].HeadID)
	require.EqualValues(t, rounds-3, blocked.Aggregates[0].Waiting)

	sink.setFail(nil)
	changed, err := b.mgr.Retry(b.ctx, stuck)
	require.NoError(t, err)
	require.Equal(t, []int64{stuck}, changed)
	b.waitStats(t, "every event delivered", func(s outbox.Stats) bool { return s.Processed == keys*rounds })
	acks, n := sink.firstAcks()
	require.Equal(t, keys*rounds, n)
	require.Equal(t, want, acks, "per key, first acknowledgements in commit order")
	require.Zero(t, sink.unordered, "every publish asked for key order")
}

// Block, then discard: an operator who discards the dead head (instead of
// retrying it) lets the key's later events go on, in order, without it.
func TestRelayOrderedDiscardDeadHead(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	const keys, rounds = 10, 5
	want := b.writeKeys(t, keys, rounds)
	stuck := want["k3"][1]
	sink := orderSinkFailing(stuck, outbox.Permanent(errors.New("refused")))
	b.start(t, outbox.RelayConfig{Sink: sink, Ordering: outbox.OrderingAggregate, BatchSize: 8, PollInterval: 10 * time.Millisecond})
	b.waitStats(t, "the other keys delivered, the stuck head dead", func(s outbox.Stats) bool {
		return s.Processed == keys*rounds-(rounds-1) && s.Failed == 1
	})
	changed, err := b.mgr.Discard(b.ctx, "operator gave up", stuck)
	require.NoError(t, err)
	require.Equal(t, []int64{stuck}, changed, "a dead-lettered head can be discarded")
	b.waitStats(t, "the stuck key delivered without its head", func(s outbox.Stats) bool { return s.Processed == keys*rounds-1 })
	acks, _ := sink.firstAcks()
	want["k3"] = append(want["k3"][:1:1], want["k3"][2:]...)
	require.Equal(t, want, acks, "per key, first acknowledgements in commit order, the discarded event left out")
	e, err := b.mgr.Event(b.ctx, stuck)
	require.NoError(t, err)
	require.Equal(t, outbox.StatusFailed, e.Status)
	require.Equal(t, "operator gave up", e.LastError)
}

// Skip: once the head is dead-lettered the key's later events go on.
func TestRelayOrderedHeadOfLineSkip(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	const keys, rounds = 50, 6
	want := b.writeKeys(t, keys, rounds)
	stuck := want["k7"][2]
	sink := orderSinkFailing(stuck, errors.New("refused"))
	b.start(t, outbox.RelayConfig{Sink: sink, Ordering: outbox.OrderingAggregate, OrderedFailure: outbox.OrderedFailureSkip,
		Workers: 2, BatchSize: 16, MaxAttempts: 3, BackoffBase: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		PollInterval: 10 * time.Millisecond})
	b.waitStats(t, "all but the dead head delivered", func(s outbox.Stats) bool {
		return s.Processed == keys*rounds-1 && s.Failed == 1
	})
	acks, _ := sink.firstAcks()
	k7 := append(append([]int64{}, want["k7"][:2]...), want["k7"][3:]...)
	require.Equal(t, k7, acks["k7"], "the key goes on past its dead head, in order")
	for k, ids := range want {
		if k != "k7" {
			require.Equal(t, ids, acks[k], "key %s", k)
		}
	}
	sent := sink.sentIDs()
	require.True(t, sent[stuck])
}

// Out-of-ID-order commits on one key: the transaction that took the lower
// ID commits last; both events are delivered, the later-committed one
// after the other, and nothing is lost.
func TestRelayOrderedOutOfIDOrderCommits(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	sink := &orderSink{}
	b.start(t, outbox.RelayConfig{Sink: sink, Ordering: outbox.OrderingAggregate, PollInterval: 5 * time.Millisecond})
	var early int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT nextval(pg_get_serial_sequence($1, 'id'))`, testutil.Table(b.schema)).Scan(&early))
	late := b.write(t, 1, func(_ int, m *outbox.Message) { m.AggregateID = "k" })[0]
	b.waitStats(t, "the later ID delivered", func(s outbox.Stats) bool { return s.Processed == 1 })
	_, err := b.pool.Exec(b.ctx, `INSERT INTO `+testutil.Table(b.schema)+` (id, event_type, aggregate_type, aggregate_id, payload)
VALUES ($1, 'thing.happened', 'thing', 'k', '{}')`, early)
	require.NoError(t, err)
	b.waitStats(t, "the lower ID, committed last, delivered too", func(s outbox.Stats) bool { return s.Processed == 2 })
	acks, _ := sink.firstAcks()
	require.Equal(t, []int64{late, early}, acks["k"])
}

// pausingSink is a sink that hangs in its first publish, past the lease,
// ignoring cancellation as a paused process would, and then tries to send
// the rest of its batch one event at a time, checking its context first as
// an ordered sink does.
type pausingSink struct {
	orderSink
	paused   chan struct{} // closed when the first publish is in
	resume   chan struct{} // closed to let it go on
	once     sync.Once
	lateSent []int64
}

func (s *pausingSink) Publish(ctx context.Context, events []outbox.Event) []error {
	first := false
	s.once.Do(func() { first = true })
	if !first {
		return s.orderSink.Publish(ctx, events)
	}
	close(s.paused)
	<-s.resume
	errs := make([]error, len(events))
	for i := range events {
		if errs[i] = ctx.Err(); errs[i] == nil {
			s.mu.Lock()
			s.lateSent = append(s.lateSent, events[i].ID)
			s.mu.Unlock()
		}
	}
	return errs
}

// A relay whose publish outlives its lease (a paused process) must not send
// a key's next event once another relay may own it: the publish's context
// ends at the lease's local deadline, before the database lets another
// relay rescue and claim the events.
func TestRelayOrderedLeaseExpiryDuringPublish(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	ids := b.write(t, 3, func(_ int, m *outbox.Message) { m.AggregateID = "k" })
	paused := &pausingSink{paused: make(chan struct{}), resume: make(chan struct{})}
	lease := 2 * time.Second
	// One batch in flight: the paused relay's one loop is stuck in the
	// publish, as in a paused process, and claims nothing else.
	b.start(t, outbox.RelayConfig{Sink: paused, Ordering: outbox.OrderingAggregate, RelayID: "paused", Lease: lease,
		SinkTimeout: lease - 100*time.Millisecond, ShutdownTimeout: time.Second, PollInterval: 10 * time.Millisecond,
		MaxInFlight: 1})
	<-paused.paused
	other := &orderSink{}
	b.start(t, outbox.RelayConfig{Sink: other, Ordering: outbox.OrderingAggregate, RelayID: "other", Lease: lease,
		RescueInterval: 100 * time.Millisecond, PollInterval: 10 * time.Millisecond})
	testutil.WaitFor(t, 20*time.Second, "the other relay delivers the key after the lease expired", func() bool {
		_, n := other.firstAcks()
		return n == 3
	})
	close(paused.resume)
	acks, _ := other.firstAcks()
	require.Equal(t, ids, acks["k"])
	b.waitStats(t, "all processed", func(s outbox.Stats) bool { return s.Processed == 3 })
	paused.mu.Lock()
	defer paused.mu.Unlock()
	require.Empty(t, paused.lateSent, "the paused relay sent events after its lease")
}

func TestRelayOrderingConfig(t *testing.T) {
	t.Parallel()
	sink := &orderSink{}
	for _, tc := range []struct {
		cfg  outbox.RelayConfig
		want string
	}{
		{outbox.RelayConfig{Ordering: "key"}, `Ordering: unknown mode "key": use none or aggregate`},
		{outbox.RelayConfig{Ordering: outbox.OrderingAggregate, OrderedFailure: "drop"}, `OrderedFailure: unknown policy "drop": use block or skip`},
		{outbox.RelayConfig{OrderedFailure: outbox.OrderedFailureSkip}, "OrderedFailure: is skip, but Ordering is none"},
		{outbox.RelayConfig{Ordering: outbox.OrderingAggregate, EventTypes: []string{"a.*"}}, "EventTypes: is set with Ordering aggregate"},
	} {
		tc.cfg.Sink = sink
		_, err := outbox.NewRelay(outbox.Postgres(testutil.Pool(t)), tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
	// A byte budget cuts an ordered batch as a prefix of its publish order
	// (drivertest OrderedClaimKeepsWithinByteBudget).
	_, err := outbox.NewRelay(outbox.Postgres(testutil.Pool(t)), outbox.RelayConfig{Sink: sink, Ordering: outbox.OrderingAggregate, MaxBatchBytes: 1000})
	require.NoError(t, err)
}

// An ordered relay whose claim found nothing because a key's batch was in
// flight (on owned partitions, its partition is not read meanwhile) claims
// again when that batch settles: the key's next event, committed while the
// batch was publishing, would otherwise wait for the poll, an hour here.
// The wake-up for that event comes while the batch is held, and the claim
// it brings, like the one 50ms after it, finds nothing.
func TestRelayOrderedClaimsAgainWhenABatchSettles(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	gate, arrived := make(chan struct{}), make(chan struct{}, 1)
	rec := outboxtest.NewRecorder()
	rec.SetFail(func(e outbox.Event) error {
		if e.EventType == "first" {
			arrived <- struct{}{}
			<-gate
		}
		return nil
	})
	r := b.start(t, outbox.RelayConfig{Sink: rec, Ordering: outbox.OrderingAggregate, PollInterval: time.Hour})
	key := func(typ string) func(int, *outbox.Message) {
		return func(_ int, m *outbox.Message) { m.EventType, m.AggregateID = typ, "k" }
	}
	// A delivery first: until one, the relay claims nothing while a batch
	// is in flight (relay_pipeline.go).
	b.write(t, 1, key("warm-up"))
	r.Wake()
	rec.WaitLen(t, 1, 10*time.Second)
	first := b.write(t, 1, key("first"))
	r.Wake()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the first event never reached the sink")
	}
	second := b.write(t, 1, key("second"))
	r.Wake()
	time.Sleep(200 * time.Millisecond) // the wake-up's claim and the one 50ms later find nothing
	require.EqualValues(t, 1, b.stats(t).Processed, "nothing more is delivered while the key's first event is held")
	close(gate)
	rec.WaitLen(t, 3, 10*time.Second)
	got := rec.Events()
	require.Equal(t, []int64{first[0], second[0]}, []int64{got[1].ID, got[2].ID})
}

// A backlog in few keys still goes out in full batches and in order: an
// ordered relay's reads start at a few events per partition (4 for a batch
// of 100 with all 256 partitions held) and raise that limit until they fill,
// and a read that took the limit from a partition is followed at once by
// the next one, never by the poll.
func TestRelayOrderedFewKeysFillBatches(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	const keys, events = 3, 600
	ids := b.write(t, events, func(i int, m *outbox.Message) { m.AggregateID = fmt.Sprint("k", i%keys) })
	rec := outboxtest.NewRecorder()
	b.start(t, outbox.RelayConfig{Sink: rec, Ordering: outbox.OrderingAggregate, BatchSize: 100, PollInterval: time.Hour})
	rec.WaitLen(t, events, 20*time.Second)
	want, got := map[string][]int64{}, map[string][]int64{}
	for i, id := range ids {
		k := fmt.Sprint("k", i%keys)
		want[k] = append(want[k], id)
	}
	for _, e := range rec.Events() {
		got[e.AggregateID] = append(got[e.AggregateID], e.ID)
	}
	require.Equal(t, want, got)
	t.Logf("%d events in %d publishes", events, rec.Calls())
	require.LessOrEqual(t, rec.Calls(), 20, "at 4 events per partition it would take 50")
}
