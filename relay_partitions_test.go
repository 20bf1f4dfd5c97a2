package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

// timedSink is an orderSink that records when each event was first
// acknowledged.
type timedSink struct {
	orderSink
	firstAck map[int64]time.Time
}

func (s *timedSink) Publish(ctx context.Context, events []outbox.Event) []error {
	errs := s.orderSink.Publish(ctx, events)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range events {
		if _, ok := s.firstAck[e.ID]; !ok && errs[i] == nil {
			s.firstAck[e.ID] = now
		}
	}
	return errs
}

// owners counts the partitions held by each relay (a live lease), and
// those held by none.
func (b relayBundle) owners(t *testing.T) map[string]int {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT coalesce(CASE WHEN lease_until > now() THEN owner END, ''), count(*) FROM `+
		pgx.Identifier{b.schema, "outbox_partitions"}.Sanitize()+` GROUP BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var owner string
		var n int
		require.NoError(t, rows.Scan(&owner, &n))
		out[owner] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// olderTransaction begins a transaction that holds a transaction ID until
// it is committed (or the test ends): the horizon of the ordered reads stays
// below every event committed after it began.
func olderTransaction(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, `SELECT pg_current_xact_id()`)
	require.NoError(t, err)
	return tx
}

// Rebalancing: ordered relays joining and leaving while writers commit move
// the partitions between them without breaking any key's order, and no
// event waits longer than a lease: a relay that joins takes free
// partitions and the others shed theirs, a relay that stops releases its
// own for the others to take at their next round.
func TestRelayOrderedPartitionsRebalance(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	sink := &timedSink{firstAck: map[int64]time.Time{}}
	lease := 2 * time.Second
	cfg := func(id string) outbox.RelayConfig {
		return outbox.RelayConfig{Sink: sink, Ordering: outbox.OrderingAggregate, RelayID: id, Lease: lease,
			PollInterval: 10 * time.Millisecond, BatchSize: 20, Workers: 2}
	}
	start := func(id string) *outbox.Relay {
		r, err := outbox.NewRelay(b.db, func() outbox.RelayConfig { c := cfg(id); c.Schema = b.schema; return c }())
		require.NoError(t, err)
		require.NoError(t, r.Start(b.ctx))
		return r
	}
	stop := func(r *outbox.Relay) {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	}

	var (
		mu        sync.Mutex
		committed = map[string][]int64{}
		at        = map[int64]time.Time{}
		writing   = make(chan struct{})
		wg        sync.WaitGroup
	)
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-writing:
				return
			case <-time.After(5 * time.Millisecond):
			}
			keys := make([]string, 4)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d", rng.IntN(100))
			}
			ids := b.write(t, len(keys), func(i int, m *outbox.Message) { m.AggregateID = keys[i] })
			now := time.Now()
			mu.Lock()
			for i, id := range ids {
				committed[keys[i]] = append(committed[keys[i]], id)
				at[id] = now
			}
			mu.Unlock()
		}
	})

	a := start("a")
	testutil.WaitFor(t, 10*time.Second, "a holds every partition", func() bool { return b.owners(t)["a"] == 256 })
	time.Sleep(500 * time.Millisecond)
	r2, r3 := start("b"), start("c")
	testutil.WaitFor(t, 10*time.Second, "the partitions are shared out among three relays", func() bool {
		o := b.owners(t)
		return o["a"] >= 80 && o["b"] >= 80 && o["c"] >= 80 && o[""] == 0
	})
	time.Sleep(500 * time.Millisecond)
	stop(a)
	testutil.WaitFor(t, 10*time.Second, "b and c take over a's partitions", func() bool {
		o := b.owners(t)
		return o["b"] == 128 && o["c"] == 128
	})
	time.Sleep(500 * time.Millisecond)
	a2 := start("a2")
	testutil.WaitFor(t, 10*time.Second, "a2 gets its share", func() bool { return b.owners(t)["a2"] >= 80 })
	time.Sleep(500 * time.Millisecond)
	stop(r2)
	time.Sleep(500 * time.Millisecond)
	close(writing)
	wg.Wait()

	mu.Lock()
	total := len(at)
	mu.Unlock()
	b.waitStats(t, "every event processed", func(s outbox.Stats) bool { return s.Processed == int64(total) })
	stop(r3)
	stop(a2)

	acks, n := sink.firstAcks()
	require.Equal(t, total, n, "every event acknowledged")
	require.Equal(t, committed, acks, "first acknowledgements in commit order for every key")
	var worst time.Duration
	sink.mu.Lock()
	for id, c := range at {
		worst = max(worst, sink.firstAck[id].Sub(c))
	}
	sink.mu.Unlock()
	t.Logf("%d events, longest wait from commit to first acknowledgement %v", total, worst)
	require.Less(t, worst, lease, "no stall as long as a lease")
}

// An ordered relay whose read found nothing but a committed event that an
// older transaction held back reads again within milliseconds, not at its
// next poll: with no wake-up and a poll interval of a minute, the event
// goes out as soon as the older transaction has ended. On owned partitions
// and under row leases (the row-lease ordered claim).
func TestRelayOrderedReadsAgainAfterAHeldBackRead(t *testing.T) {
	t.Parallel()
	forEachLeases(t, testRelayOrderedReadsAgainAfterAHeldBackRead)
}

func testRelayOrderedReadsAgainAfterAHeldBackRead(t *testing.T, leases outbox.Leases) {
	b := setupRelay(t)
	older := olderTransaction(t, b.pool)
	b.write(t, 1, func(_ int, m *outbox.Message) { m.AggregateID = "k" })
	sink := outboxtest.NewRecorder()
	b.start(t, outbox.RelayConfig{Sink: sink, Ordering: outbox.OrderingAggregate, PollInterval: time.Minute, Leases: leases})
	// The relay reads at once, and again while the older transaction
	// holds the event back.
	time.Sleep(300 * time.Millisecond)
	require.Zero(t, sink.Len(), "read while an older transaction ran")
	require.NoError(t, older.Commit(b.ctx))
	sink.WaitLen(t, 1, 10*time.Second)
}

// An unordered relay on owned partitions (LeasesPartitions) holds the
// partitions, writes no event before it settles it (what is in flight
// stays pending, none processing) and keeps no order: a key's later events
// go while its first one is retrying, and events committed while an older
// transaction still runs go at once. Refused without partitions: on a
// schema before migration 8, and with an event type filter.
func TestRelayUnorderedPartitions(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	older := olderTransaction(t, b.pool)
	key := func(_ int, m *outbox.Message) { m.AggregateType, m.AggregateID = "order", "k" }
	first := b.write(t, 1, key)[0]
	gate, arrived := make(chan struct{}), make(chan struct{}, 3)
	rec := outboxtest.NewRecorder()
	rec.SetFail(func(e outbox.Event) error {
		if e.ID == first {
			return errors.New("broker rejected it")
		}
		arrived <- struct{}{}
		<-gate
		return nil
	})
	b.start(t, outbox.RelayConfig{Sink: rec, RelayID: "r", Leases: outbox.LeasesPartitions, PollInterval: 10 * time.Millisecond,
		BackoffBase: time.Hour, BackoffMax: time.Hour})
	require.Equal(t, map[string]int{"r": 256}, b.owners(t))
	testutil.WaitFor(t, 10*time.Second, "the first event failed", func() bool {
		e, err := b.mgr.Event(b.ctx, first)
		require.NoError(t, err)
		return e.Attempts == 1
	})
	b.write(t, 2, key)
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the later events did not reach the sink")
	}
	require.Zero(t, b.stats(t).Processing, "an event in flight is not written")
	// The horizon is the cluster's: other tests' ordered reads wait for it.
	require.NoError(t, older.Rollback(b.ctx))
	close(gate)
	b.waitStats(t, "the later events processed while the first retries", func(s outbox.Stats) bool {
		return s.Processed == 2 && s.Pending == 1
	})
	e, err := b.mgr.Event(b.ctx, first)
	require.NoError(t, err)
	require.Equal(t, "broker rejected it", e.LastError)

	// Refused without partitions.
	r, err := outbox.NewRelay(b.db, outbox.RelayConfig{Sink: rec, Schema: b.schema, Leases: outbox.LeasesPartitions, EventTypes: []string{"order.*"}})
	require.Nil(t, r)
	var ce *outbox.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "Leases", ce.Field)
	old := setupRelay(t)
	_, err = old.pool.Exec(old.ctx, `DELETE FROM `+pgx.Identifier{old.schema, "outbox_migrations"}.Sanitize()+` WHERE version >= 8`)
	require.NoError(t, err)
	r, err = outbox.NewRelay(old.db, outbox.RelayConfig{Sink: rec, Schema: old.schema, Leases: outbox.LeasesPartitions})
	require.NoError(t, err)
	require.ErrorContains(t, r.Start(old.ctx), `leases "partitions" need schema version 8, schema "`+old.schema+`" is at 7: run outbox migrate`)
}

// silentSink answers nothing until its publish is cancelled, and then
// only 300ms later (longer than the lease margin), and counts its calls.
type silentSink struct{ calls atomic.Int64 }

func (s *silentSink) Publish(ctx context.Context, events []outbox.Event) []error {
	s.calls.Add(1)
	<-ctx.Done()
	time.Sleep(300 * time.Millisecond)
	return outbox.BatchError(len(events), fmt.Errorf("no answer: %w", ctx.Err()))
}

// A partition read's lease is what its partitions had left, at least half a
// lease, which a sink timeout may pass: the publish is cut before that lease
// ends, and its failure is marked (an attempt spent) under the partitions'
// fence even when the sink answers the cut late, so the event is
// dead-lettered after MaxAttempts, instead of going back unmarked to be
// published again and again with no attempt counted.
func TestRelayPartitionPublishEndsWithinItsLease(t *testing.T) {
	t.Parallel()
	forEachLeases(t, func(t *testing.T, leases outbox.Leases) {
		b := setupRelay(t)
		sink := &silentSink{}
		logs := &logBuffer{}
		logs.dumpOnFailure(t)
		b.start(t, outbox.RelayConfig{Sink: sink, Leases: leases, Lease: 2 * time.Second, SinkTimeout: 1500 * time.Millisecond,
			PollInterval: 50 * time.Millisecond, MaxAttempts: 2, BackoffBase: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond,
			Logger: logs.logger()})
		// Start says so on partitions, where a batch may have less than
		// the sink timeout: half the 2 s lease less a tenth of it.
		const warning = "the sink timeout is longer than a batch on owned partitions may publish"
		if leases == outbox.LeasesPartitions {
			require.True(t, logs.hasLine(warning, "sink_timeout=1.5s", "publish_bound=800ms"), logs.String())
		} else {
			require.NotContains(t, logs.String(), warning)
		}
		time.Sleep(700 * time.Millisecond) // the partitions' lease partly spent
		id := b.write(t, 1, nil)[0]
		b.waitStats(t, "dead-lettered after two attempts", func(s outbox.Stats) bool { return s.Failed == 1 })
		e, err := b.mgr.Event(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, 2, e.Attempts)
		require.EqualValues(t, 2, sink.calls.Load(), "published once per attempt")
	})
}
