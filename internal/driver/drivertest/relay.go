package drivertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

// startRelay runs a relay on db until the test ends.
func startRelay(t *testing.T, db outbox.Database, schema string, cfg outbox.RelayConfig) *outbox.Relay {
	t.Helper()
	cfg.Schema = schema
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := outbox.NewRelay(db, cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
	return r
}

// exclusiveSink records deliveries and counts publishes of an event while
// another relay is publishing it.
type exclusiveSink struct {
	mu        sync.Mutex
	inFlight  map[int64]bool
	delivered map[int64]int
	aggIDs    map[string]bool
	overlaps  atomic.Int64
}

func (s *exclusiveSink) Publish(_ context.Context, events []outbox.Event) []error {
	s.mu.Lock()
	for _, e := range events {
		if s.inFlight[e.ID] {
			s.overlaps.Add(1)
		}
		s.inFlight[e.ID] = true
	}
	s.mu.Unlock()
	time.Sleep(time.Millisecond) // widen the window in which an overlap would show
	s.mu.Lock()
	for _, e := range events {
		delete(s.inFlight, e.ID)
		s.delivered[e.ID]++
		s.aggIDs[e.AggregateID] = true
	}
	s.mu.Unlock()
	return nil
}

func (s *exclusiveSink) counts() map[int64]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int64]int, len(s.delivered))
	for k, v := range s.delivered {
		out[k] = v
	}
	return out
}

// testRelaysEndToEnd runs three relays, each on a pool of its own (as three
// processes would), while writers commit and roll back events: every
// committed event is published exactly once, no rolled-back one is, and no
// two relays publish an event at the same time.
func testRelaysEndToEnd(t *testing.T, h Harness) {
	b := setup(t, h)
	sink := &exclusiveSink{inFlight: map[int64]bool{}, delivered: map[int64]int{}, aggIDs: map[string]bool{}}
	var relays []*outbox.Relay
	for i := range 3 {
		db := b.db.Database
		if b.db.Reopen != nil {
			db = b.db.Reopen(t)
		}
		relays = append(relays, startRelay(t, db, b.db.Schema, outbox.RelayConfig{
			Sink: sink, RelayID: fmt.Sprint("relay-", i), BatchSize: 20, Workers: 2, Lease: 10 * time.Second,
			PgBouncer: h.Pooled,
		}))
	}

	var (
		mu        sync.Mutex
		committed []int64
		rolled    []string // aggregate IDs: a rolled-back ID may be given again (SQLite)
		wg        sync.WaitGroup
	)
	for w := range 3 {
		wg.Go(func() {
			for txn := range 10 {
				msgs := make([]outbox.Message, 8)
				for i := range msgs {
					msgs[i] = outbox.Message{EventType: "thing.happened", AggregateID: fmt.Sprint(w, "-", txn, "-", i), Payload: i}
				}
				tx, err := b.db.Begin(b.ctx)
				if err != nil {
					t.Error(err)
					return
				}
				res, err := tx.Write(b.ctx, b.writer, msgs...)
				if err != nil {
					_ = tx.Rollback(b.ctx)
					t.Error(err)
					return
				}
				if txn%4 == 3 {
					err = tx.Rollback(b.ctx)
				} else {
					err = tx.Commit(b.ctx)
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if txn%4 == 3 {
					for _, m := range msgs {
						rolled = append(rolled, m.AggregateID)
					}
				} else {
					committed = append(committed, res.IDs...)
				}
				mu.Unlock()
				relays[txn%len(relays)].Wake()
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	testutil.WaitFor(t, 30*time.Second, "every committed event processed", func() bool {
		s, err := b.mgr.Stats(b.ctx)
		require.NoError(t, err)
		return s.Processed == int64(len(committed))
	})
	delivered := sink.counts()
	for _, id := range committed {
		require.Equal(t, 1, delivered[id], "event %d", id)
	}
	sink.mu.Lock()
	for _, agg := range rolled {
		require.False(t, sink.aggIDs[agg], "rolled-back event %s was published", agg)
	}
	sink.mu.Unlock()
	require.Len(t, delivered, len(committed))
	require.Zero(t, sink.overlaps.Load(), "two relays published one event at once")
	s, err := b.mgr.Stats(b.ctx)
	require.NoError(t, err)
	require.Zero(t, s.Pending+s.Processing+s.Failed)
}

// testRelayDeadLetter drives retries, a dead letter at max attempts, a
// permanent failure and an operator's retry through a real relay.
func testRelayDeadLetter(t *testing.T, h Harness) {
	b := setup(t, h)
	rec := outboxtest.NewRecorder()
	var healthy atomic.Bool
	rec.SetFail(func(e outbox.Event) error {
		if healthy.Load() {
			return nil
		}
		if e.EventType == "bad" {
			return outbox.Permanent(fmt.Errorf("rejected"))
		}
		return fmt.Errorf("unavailable")
	})
	dead := make(chan outbox.Event, 2)
	res := b.write(t, outbox.Message{EventType: "flaky", Payload: 1}, outbox.Message{EventType: "bad", Payload: 2})
	startRelay(t, b.db.Database, b.db.Schema, outbox.RelayConfig{
		Sink: rec, RelayID: "r", MaxAttempts: 3, BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		Hooks: []outbox.Hook{deadHook(dead)}, PgBouncer: h.Pooled,
	})
	got := map[string]outbox.Event{}
	for range 2 {
		select {
		case e := <-dead:
			got[e.EventType] = e
		case <-time.After(30 * time.Second):
			t.Fatal("timed out waiting for dead letters")
		}
	}
	require.Equal(t, 3, got["flaky"].Attempts)
	require.Equal(t, 1, got["bad"].Attempts)
	flaky := b.get(t, res.IDs[0])
	require.Equal(t, "failed", flaky.Status)
	require.Equal(t, 3, flaky.Attempts)
	require.Equal(t, "unavailable", flaky.LastError)

	healthy.Store(true)
	retried, err := b.mgr.Retry(b.ctx, res.IDs...)
	require.NoError(t, err)
	require.Equal(t, res.IDs, retried)
	testutil.WaitFor(t, 30*time.Second, "retried events processed", func() bool {
		s, err := b.mgr.Stats(b.ctx)
		require.NoError(t, err)
		return s.Processed == 2
	})
}

type deadHook chan outbox.Event

func (d deadHook) OnDeadLetter(_ context.Context, e outbox.Event, _ error) { d <- e }

// testRelayStoresSanitizedErrors: a sink error holding a NUL byte and
// invalid UTF-8 (a response body, a panic message) is stored as valid UTF-8
// without NUL. PostgreSQL and MariaDB refuse the raw text, and a mark that
// can never succeed would leave the event to loop forever.
func testRelayStoresSanitizedErrors(t *testing.T, h Harness) {
	b := setup(t, h)
	rec := outboxtest.NewRecorder()
	rec.SetFail(func(outbox.Event) error {
		return outbox.Permanent(fmt.Errorf("HTTP 400: bad\x00body \xff\xfe\xc3(end)"))
	})
	dead := make(chan outbox.Event, 1)
	id := b.write(t, outbox.Message{EventType: "e", Payload: 1}).IDs[0]
	startRelay(t, b.db.Database, b.db.Schema, outbox.RelayConfig{
		Sink: rec, RelayID: "r", Lease: 5 * time.Second, Hooks: []outbox.Hook{deadHook(dead)}, PgBouncer: h.Pooled,
	})
	const want = "HTTP 400: bad\uFFFDbody \uFFFD(end)"
	select {
	case e := <-dead:
		require.Equal(t, want, e.LastError)
	case <-time.After(30 * time.Second):
		t.Fatal("the event was never dead-lettered")
	}
	e := b.get(t, id)
	require.Equal(t, driver.StatusFailed, e.Status)
	require.Equal(t, want, e.LastError)
}

// refuseMarks makes the database refuse two kinds of mark, as a constraint
// or a value it cannot store would: marking an event with aggregate ID
// "poison" processed, and storing a last error that mentions "forbidden".
func refuseMarks(t *testing.T, h Harness, db *DB) {
	t.Helper()
	switch h.Name {
	case "sqlite": // no ALTER TABLE … ADD CONSTRAINT: triggers
		db.Exec(t, `CREATE TRIGGER poison_processed BEFORE UPDATE ON outbox_events WHEN NEW.status = 'processed' AND NEW.aggregate_id = 'poison' BEGIN SELECT RAISE(ABORT, 'poison'); END;
CREATE TRIGGER poison_error BEFORE UPDATE ON outbox_events WHEN NEW.last_error LIKE '%forbidden%' BEGIN SELECT RAISE(ABORT, 'poison'); END;`)
	default:
		db.Exec(t, `ALTER TABLE `+db.Table+` ADD CONSTRAINT poison CHECK ((status <> 'processed' OR aggregate_id <> 'poison') AND last_error NOT LIKE '%forbidden%')`)
	}
}

// testRelayDeadLettersRefusedMarks: a mark the database refuses for one
// row's data fails the whole batch's statement, every time. The relay
// settles that batch row by row: the other events are marked as usual and
// the refused ones are dead-lettered with a reason that says so, instead of
// the batch being re-sent forever.
func testRelayDeadLettersRefusedMarks(t *testing.T, h Harness) {
	b := setup(t, h)
	refuseMarks(t, h, b.db)
	msgs := make([]outbox.Message, 8)
	for i := range msgs {
		msgs[i] = outbox.Message{EventType: "e", AggregateID: fmt.Sprint("ok-", i), Payload: i}
	}
	msgs[2].AggregateID = "poison"    // published; its processed mark is refused
	msgs[5].AggregateID = "forbidden" // its publish fails; the failure's mark is refused
	msgs[6].AggregateID = "flaky"     // its publish fails once; retried
	ids := b.write(t, msgs...).IDs

	rec := outboxtest.NewRecorder()
	var flaked atomic.Bool
	rec.SetFail(func(e outbox.Event) error {
		switch {
		case e.AggregateID == "forbidden":
			return errors.New("HTTP 403: forbidden")
		case e.AggregateID == "flaky" && flaked.CompareAndSwap(false, true):
			return errors.New("HTTP 503")
		}
		return nil
	})
	dead := make(chan outbox.Event, 10)
	startRelay(t, b.db.Database, b.db.Schema, outbox.RelayConfig{
		Sink: rec, RelayID: "r", BatchSize: 10, Lease: 5 * time.Second, MaxAttempts: 3,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, Hooks: []outbox.Hook{deadHook(dead)},
		PgBouncer: h.Pooled,
	})
	got := map[int64]outbox.Event{}
	for range 2 {
		select {
		case e := <-dead:
			got[e.ID] = e
		case <-time.After(30 * time.Second):
			t.Fatalf("timed out waiting for the refused events to be dead-lettered; got %v", got)
		}
	}
	testutil.WaitFor(t, 30*time.Second, "the other events processed", func() bool {
		s, err := b.mgr.Stats(b.ctx)
		require.NoError(t, err)
		return s.Processed == 6
	})

	poison := b.get(t, ids[2])
	require.Equal(t, driver.StatusFailed, poison.Status)
	require.Contains(t, poison.LastError, "dead-lettered: it was published, but the database refused to mark it processed: ")
	require.Equal(t, poison.LastError, got[ids[2]].LastError, "the hook sees the stored reason")
	forbidden := b.get(t, ids[5])
	require.Equal(t, driver.StatusFailed, forbidden.Status)
	require.Contains(t, forbidden.LastError, "dead-lettered: its publish failed, and the database refused to record the failure: ")
	require.NotContains(t, forbidden.LastError, "forbidden")
	require.Equal(t, driver.StatusProcessed, b.get(t, ids[6]).Status)
	require.Equal(t, 1, b.get(t, ids[6]).Attempts, "the retry was recorded row by row")

	// One claim settled the batch: nothing was delivered again after a
	// lease expiry.
	delivered := map[int64]int{}
	for _, e := range rec.Events() {
		delivered[e.ID]++
	}
	for i, id := range ids {
		want := 1
		if i == 5 {
			want = 0 // its publish always fails
		}
		require.Equal(t, want, delivered[id], "event %d (%s)", id, msgs[i].AggregateID)
	}
}
