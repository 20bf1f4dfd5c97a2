package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
)

// gateSink lets its first publish through, so that the relay, which
// pipelines only once a batch was delivered, holds several batches; it
// holds every later publish until its gate opens (or its context ends) and
// records how many publishes ran at once.
type gateSink struct {
	gate chan struct{}
	once sync.Once

	mu      sync.Mutex
	cur     int
	most    int
	batches int
}

func newGateSink() *gateSink { return &gateSink{gate: make(chan struct{})} }

func (s *gateSink) Publish(ctx context.Context, events []outbox.Event) []error {
	s.mu.Lock()
	s.batches++
	if s.batches == 1 {
		s.mu.Unlock()
		return nil
	}
	s.cur++
	s.most = max(s.most, s.cur)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.cur--
		s.mu.Unlock()
	}()
	select {
	case <-s.gate:
		return nil
	case <-ctx.Done():
		return outbox.BatchError(len(events), ctx.Err())
	}
}

func (s *gateSink) open() { s.once.Do(func() { close(s.gate) }) }

// held reports the publishes running now and the most that ever ran at once.
func (s *gateSink) held() (now, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur, s.most
}

func (s *gateSink) waitHeld(t *testing.T, n int) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, "publishes in flight", func() bool {
		now, _ := s.held()
		return now >= n
	})
}

func TestRelayPipelineHoldsMaxInFlightBatches(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	b.write(t, 70, nil)
	sink := newGateSink()
	b.start(t, outbox.RelayConfig{Sink: sink, BatchSize: 10, Workers: 1, MaxInFlight: 3})

	// After the first batch went through, one claim loop holds three
	// batches: it claimed the second and third while the first of them was
	// still publishing.
	sink.waitHeld(t, 3)
	require.EqualValues(t, 30, b.stats(t).Processing, "a loop claims only with a free slot")
	sink.open()
	b.waitStats(t, "all processed", func(s outbox.Stats) bool { return s.Processed == 70 })
	_, most := sink.held()
	require.Equal(t, 3, most, "never more than MaxInFlight batches at once")
}

func TestRelayPipelineKeepsToTheByteBudget(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	big := strings.Repeat("x", 1000)
	b.write(t, 11, func(_ int, m *outbox.Message) { m.Payload = map[string]string{"s": big} })
	sink := newGateSink()
	// Each batch holds one ~1 kB event: a loop claims while the batches in
	// flight hold less than 2,500 bytes, so it stops at three.
	b.start(t, outbox.RelayConfig{Sink: sink, BatchSize: 1, MaxInFlight: 8, MaxInFlightBytes: 2500})
	sink.waitHeld(t, 3)
	require.EqualValues(t, 3, b.stats(t).Processing, "claimed past the byte budget")
	sink.open()
	b.waitStats(t, "all processed", func(s outbox.Stats) bool { return s.Processed == 11 })
	_, most := sink.held()
	require.Equal(t, 3, most, "the budget bounds the batches in flight")
}

func TestRelayStopSettlesEveryBatchInFlight(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	b.write(t, 50, nil)
	sink := newGateSink()
	r := b.start(t, outbox.RelayConfig{Sink: sink, BatchSize: 10, MaxInFlight: 3})
	sink.waitHeld(t, 3)

	stopped := make(chan error)
	go func() { stopped <- r.Stop(context.Background()) }()
	testutil.WaitFor(t, 10*time.Second, "stop began", func() bool { return !r.Running() })
	sink.open() // the three publishes complete during the stop
	require.NoError(t, <-stopped)
	s := b.stats(t)
	require.EqualValues(t, 40, s.Processed, "every batch in flight was marked")
	require.EqualValues(t, 10, s.Pending, "nothing claimed after Stop")
	require.Zero(t, s.Processing)
}

func TestRelayHardStopReleasesEveryBatchInFlight(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	ids := b.write(t, 40, nil)
	sink := newGateSink()
	r := b.start(t, outbox.RelayConfig{Sink: sink, BatchSize: 10, MaxInFlight: 3})
	sink.waitHeld(t, 3)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, r.Stop(ctx), context.DeadlineExceeded)
	s := b.stats(t)
	require.EqualValues(t, 30, s.Pending, "every batch in flight was released")
	require.Zero(t, s.Processing)
	for _, id := range ids[10:] {
		e, err := b.mgr.Event(b.ctx, id)
		require.NoError(t, err)
		require.Zero(t, e.Attempts, "event %d: a hard stop spends no attempt", id)
	}
}

// heldKeySink holds the publish of any batch with an event of aggregate
// "k" until its gate opens, passes every other batch at once, and records
// the order in which events were acknowledged.
type heldKeySink struct {
	gate chan struct{}
	held chan struct{} // closed once a batch with "k" is held

	mu    sync.Mutex
	once  sync.Once
	acked []int64
}

func (s *heldKeySink) Publish(ctx context.Context, events []outbox.Event) []error {
	for _, e := range events {
		if e.AggregateID == "k" {
			s.once.Do(func() { close(s.held) })
			select {
			case <-s.gate:
			case <-ctx.Done():
				return outbox.BatchError(len(events), ctx.Err())
			}
			break
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range events {
		s.acked = append(s.acked, e.ID)
	}
	return nil
}

func (s *heldKeySink) ackedIDs() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.acked...)
}

// With batches in flight, the ordered mode still publishes an aggregate's
// later event only once its earlier one was acknowledged: the relay keeps
// claiming and publishing other aggregates' batches while the earlier
// one's publish hangs, and never the later one.
func TestRelayOrderedPipelineHoldsAKeysLaterBatch(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	sink := &heldKeySink{gate: make(chan struct{}), held: make(chan struct{})}
	b.write(t, 1, func(_ int, m *outbox.Message) { m.AggregateID = "first" })
	b.start(t, outbox.RelayConfig{Sink: sink, Ordering: outbox.OrderingAggregate, BatchSize: 5, MaxInFlight: 4})
	testutil.WaitFor(t, 10*time.Second, "the first batch delivered", func() bool { return len(sink.ackedIDs()) == 1 })

	k1 := b.write(t, 1, func(_ int, m *outbox.Message) { m.AggregateID = "k" })[0]
	<-sink.held
	later := b.write(t, 21, func(i int, m *outbox.Message) {
		m.AggregateID = fmt.Sprintf("x%d", i)
		if i == 0 {
			m.AggregateID = "k"
		}
	})
	k2, others := later[0], later[1:]
	// Five batches of other aggregates go through while k's first event
	// hangs: the relay pipelines around it.
	testutil.WaitFor(t, 10*time.Second, "the other aggregates delivered", func() bool {
		return len(sink.ackedIDs()) == 1+len(others)
	})
	require.NotContains(t, sink.ackedIDs(), k2)
	e, err := b.mgr.Event(b.ctx, k2)
	require.NoError(t, err)
	require.Equal(t, outbox.StatusPending, e.Status, "k's later event is not claimed while its earlier one is in flight")

	close(sink.gate)
	b.waitStats(t, "all processed", func(s outbox.Stats) bool { return s.Processed == 23 })
	acked := sink.ackedIDs()
	require.Less(t, slices.Index(acked, k1), slices.Index(acked, k2), "k's events acknowledged in order")
}

// overlapSink takes a while over every publish and records, for each
// suspect (an event with a lease expiry on record), whether any other
// publish ran while it was published.
type overlapSink struct {
	mu        sync.Mutex
	running   int           // publishes under way
	suspect   bool          // one of them holds a suspect
	batches   map[int64]int // the size of the batch each suspect went in
	overlaps  []int64       // suspects published beside another batch
	published map[int64]int // publishes per event
}

func (s *overlapSink) Publish(_ context.Context, events []outbox.Event) []error {
	var suspects []int64
	for _, e := range events {
		if e.LeaseExpiries > 0 {
			suspects = append(suspects, e.ID)
		}
	}
	s.mu.Lock()
	s.running++
	if len(suspects) > 0 {
		if s.running > 1 {
			s.overlaps = append(s.overlaps, suspects...)
		}
		s.suspect = true
		for _, id := range suspects {
			s.batches[id] = len(events)
		}
	} else if s.suspect {
		s.overlaps = append(s.overlaps, -1) // a batch started beside a suspect
	}
	for _, e := range events {
		s.published[e.ID]++
	}
	s.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	s.mu.Lock()
	s.running--
	if len(suspects) > 0 {
		s.suspect = false
	}
	s.mu.Unlock()
	return nil
}

// A suspect is published with nothing else in flight, so that if it kills
// the relay again the lease expiries are charged to it alone: the claim
// takes it alone, the pipeline holds no other batch beside it, and one
// claimed while other batches are in flight goes back unpublished and is
// claimed again once they settled. Two claim loops and four batches in
// flight keep the pipeline full around the suspects. The same holds for an
// ordered relay on owned partitions, whose read takes a suspect alone and
// whose next read, after one went back, starts at its partition.
func TestRelayPipelinePublishesASuspectAlone(t *testing.T) {
	t.Parallel()
	for _, ordering := range []outbox.Ordering{outbox.OrderingNone, outbox.OrderingAggregate} {
		t.Run(string(ordering), func(t *testing.T) {
			t.Parallel()
			b := setupRelay(t)
			ids := b.write(t, 60, nil)
			suspects := []int64{ids[17], ids[18], ids[41]}
			_, err := b.pool.Exec(b.ctx, `UPDATE `+testutil.Table(b.schema)+` SET attempts = 1, lease_expiries = 1 WHERE id = ANY($1)`, suspects)
			require.NoError(t, err)
			sink := &overlapSink{batches: map[int64]int{}, published: map[int64]int{}}
			b.start(t, outbox.RelayConfig{Sink: sink, BatchSize: 5, Workers: 2, MaxInFlight: 4, Ordering: ordering,
				PollInterval: 10 * time.Millisecond})
			b.waitStats(t, "all processed", func(s outbox.Stats) bool { return s.Processed == 60 })

			sink.mu.Lock()
			defer sink.mu.Unlock()
			require.Empty(t, sink.overlaps, "suspects published beside other batches (-1: a batch started beside a suspect)")
			for _, id := range suspects {
				require.Equal(t, 1, sink.batches[id], "suspect %d is published alone", id)
			}
			for _, id := range ids {
				require.Equal(t, 1, sink.published[id], "event %d published once", id)
			}
			for _, id := range suspects {
				e, err := b.mgr.Event(b.ctx, id)
				require.NoError(t, err)
				require.Equal(t, 1, e.Attempts, "suspect %d: going back unpublished spends no attempt", id)
			}
		})
	}
}

// seqSink numbers its publishes; a batch hook numbers the moment the
// suspect goes back unpublished.
type seqSink struct {
	suspect  int64
	mu       sync.Mutex
	calls    int // publishes started
	sentBack int // calls when the suspect went back; -1 until it does
	taken    int // calls before the one that published the suspect; -1 until then
}

func (s *seqSink) Publish(_ context.Context, events []outbox.Event) []error {
	s.mu.Lock()
	if slices.ContainsFunc(events, func(e outbox.Event) bool { return e.ID == s.suspect }) && s.taken < 0 {
		s.taken = s.calls
	}
	s.calls++
	s.mu.Unlock()
	time.Sleep(5 * time.Millisecond)
	return nil
}

func (s *seqSink) OnBatch(_ context.Context, b outbox.BatchInfo) {
	if b.Released == 0 || !slices.ContainsFunc(b.Events, func(e outbox.Event) bool { return e.ID == s.suspect }) {
		return
	}
	s.mu.Lock()
	if s.sentBack < 0 {
		s.sentBack = s.calls
	}
	s.mu.Unlock()
}

// An ordered relay on owned partitions that sends a suspect back (other
// batches were in flight) reads its partition first next: reads rotate
// over the 256 partitions, one step per read, so under a backlog the
// suspect, and its key, would otherwise wait until the rotation came back
// to it, some 255 reads later. The backlog covers every partition; the
// suspect is the oldest event of the partition that the read at offset 30
// (the 31st) starts at, when the pipeline is full.
func TestRelayOrderedSuspectSentBackIsReadNext(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	b.write(t, 4096, nil)
	const part = 256 - 30
	var suspect int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT min(id) FROM `+testutil.Table(b.schema)+`
        WHERE (hashtext(coalesce(aggregate_type, '') || ':' || coalesce(aggregate_id, id::text)) & 255) = $1`, part).Scan(&suspect))
	_, err := b.pool.Exec(b.ctx, `UPDATE `+testutil.Table(b.schema)+` SET attempts = 1, lease_expiries = 1 WHERE id = $1`, suspect)
	require.NoError(t, err)
	sink := &seqSink{suspect: suspect, sentBack: -1, taken: -1}
	const inFlight = 4
	b.start(t, outbox.RelayConfig{Sink: sink, Hooks: []outbox.Hook{sink}, BatchSize: 5, Workers: 2, MaxInFlight: inFlight,
		Ordering: outbox.OrderingAggregate, PollInterval: 10 * time.Millisecond})
	testutil.WaitFor(t, 60*time.Second, "the suspect published", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return sink.taken >= 0
	})

	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.GreaterOrEqual(t, sink.sentBack, 0, "the suspect was never sent back: the pipeline was not full when it was read")
	require.LessOrEqual(t, sink.taken-sink.sentBack, inFlight,
		"publishes after the suspect went back, before it went out: only the batches already in flight may go first")
}
