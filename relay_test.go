package outbox_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
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

type relayBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	db     outbox.Database
	schema string
	mgr    *outbox.Manager
	writer *outbox.Writer
}

func setupRelay(t *testing.T) relayBundle {
	t.Helper()
	pool, schema := testutil.Schema(t)
	db := outbox.Postgres(pool)
	return relayBundle{
		ctx: context.Background(), pool: pool, db: db, schema: schema,
		mgr:    outbox.NewManager(db, outbox.ManagerConfig{Schema: schema}),
		writer: outbox.NewWriter(outbox.WriterConfig{Schema: schema}),
	}
}

// write commits n events in one transaction and returns their IDs.
func (b relayBundle) write(t *testing.T, n int, mod func(i int, m *outbox.Message)) []int64 {
	t.Helper()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{EventType: "thing.happened", AggregateType: "thing", AggregateID: fmt.Sprint(i), Payload: map[string]int{"i": i}}
		if mod != nil {
			mod(i, &msgs[i])
		}
	}
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	res, err := b.writer.Write(b.ctx, tx, msgs...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	return res.IDs
}

// start runs a relay until the test ends.
func (b relayBundle) start(t *testing.T, cfg outbox.RelayConfig) *outbox.Relay {
	t.Helper()
	return startRelay(t, b.db, b.schema, cfg)
}

func startRelay(t *testing.T, db outbox.Database, schema string, cfg outbox.RelayConfig) *outbox.Relay {
	t.Helper()
	cfg.Schema = schema
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
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

func (b relayBundle) stats(t *testing.T) outbox.Stats {
	t.Helper()
	s, err := b.mgr.Stats(b.ctx)
	require.NoError(t, err)
	return s
}

func (b relayBundle) waitStats(t *testing.T, msg string, cond func(outbox.Stats) bool) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, msg, func() bool { return cond(b.stats(t)) })
}

// forEachLeases runs test in parallel with row leases and with owned
// partitions (RelayConfig.Leases).
func forEachLeases(t *testing.T, test func(t *testing.T, leases outbox.Leases)) {
	for _, leases := range []outbox.Leases{outbox.LeasesRows, outbox.LeasesPartitions} {
		t.Run(string(leases), func(t *testing.T) {
			t.Parallel()
			test(t, leases)
		})
	}
}

func TestRelayPublishesAndMarksProcessed(t *testing.T) {
	t.Parallel()
	forEachLeases(t, testRelayPublishesAndMarksProcessed)
}

func testRelayPublishesAndMarksProcessed(t *testing.T, leases outbox.Leases) {
	b := setupRelay(t)
	ids := b.write(t, 250, nil)
	rec := outboxtest.NewRecorder()
	r := b.start(t, outbox.RelayConfig{Sink: rec, BatchSize: 100, RelayID: "relay-a", Leases: leases})

	rec.WaitLen(t, 250, 20*time.Second)
	b.waitStats(t, "all processed", func(s outbox.Stats) bool { return s.Processed == 250 })
	require.Equal(t, "relay-a", r.ID())

	seen := map[int64]int{}
	for _, e := range rec.Events() {
		seen[e.ID]++
	}
	for _, id := range ids {
		require.Equal(t, 1, seen[id], "event %d", id)
	}
	e, err := b.mgr.Event(b.ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, outbox.StatusProcessed, e.Status)
	require.False(t, e.ProcessedAt.IsZero())
	require.True(t, e.LockedUntil.IsZero())
	require.Equal(t, "relay-a", e.LockedBy)
	require.Zero(t, e.Attempts)
	s := b.stats(t)
	require.Zero(t, s.Pending+s.Processing+s.Failed)
}

func TestRelayPlainSQLInsertIsPublished(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	// The contract for writers in other languages: four columns, the rest
	// defaulted.
	_, err := b.pool.Exec(b.ctx, `INSERT INTO `+testutil.Table(b.schema)+
		` (event_type, aggregate_type, aggregate_id, payload) VALUES ('user.created', 'user', '42', '{"name":"Ada"}')`)
	require.NoError(t, err)
	rec := outboxtest.NewRecorder()
	b.start(t, outbox.RelayConfig{Sink: rec})
	rec.WaitLen(t, 1, 10*time.Second)
	e := rec.Events()[0]
	require.Equal(t, "user.created", e.EventType)
	require.Equal(t, "42", e.AggregateID)
	require.JSONEq(t, `{"name":"Ada"}`, string(e.Payload))
}

func TestRelayNeverPublishesRolledBackEvents(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	rec := outboxtest.NewRecorder()
	b.start(t, outbox.RelayConfig{Sink: rec})

	for i := range 20 {
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		_, err = b.writer.Write(b.ctx, tx, outbox.Message{EventType: "ev", AggregateID: fmt.Sprint(i), Payload: i})
		require.NoError(t, err)
		if i%2 == 0 {
			require.NoError(t, tx.Commit(b.ctx))
		} else {
			require.NoError(t, tx.Rollback(b.ctx))
		}
	}
	b.waitStats(t, "10 processed", func(s outbox.Stats) bool { return s.Processed == 10 })
	for _, e := range rec.Events() {
		var i int
		_, err := fmt.Sscan(e.AggregateID, &i)
		require.NoError(t, err)
		require.Zero(t, i%2, "published rolled-back event %d", i)
	}
	require.Equal(t, 10, rec.Len())
}

// exclusiveSink fails the test if two relays publish the same event at the
// same time, and counts deliveries per event.
type exclusiveSink struct {
	mu        sync.Mutex
	inFlight  map[int64]string
	delivered map[int64]int
	overlaps  atomic.Int64
}

func (s *exclusiveSink) publisher(relay string) outbox.Sink {
	return outbox.SinkFunc(func(ctx context.Context, events []outbox.Event) []error {
		s.mu.Lock()
		for _, e := range events {
			if _, busy := s.inFlight[e.ID]; busy {
				s.overlaps.Add(1)
			}
			s.inFlight[e.ID] = relay
		}
		s.mu.Unlock()
		time.Sleep(time.Millisecond) // widen the window in which an overlap would show
		s.mu.Lock()
		for _, e := range events {
			delete(s.inFlight, e.ID)
			s.delivered[e.ID]++
		}
		s.mu.Unlock()
		return nil
	})
}

func TestRelayConcurrentRelaysAndWriters(t *testing.T) {
	t.Parallel()
	forEachLeases(t, testRelayConcurrentRelaysAndWriters)
}

func testRelayConcurrentRelaysAndWriters(t *testing.T, leases outbox.Leases) {
	b := setupRelay(t)
	sink := &exclusiveSink{inFlight: map[int64]string{}, delivered: map[int64]int{}}
	lease := outbox.LeaseDefault
	if leases == outbox.LeasesPartitions {
		lease = 5 * time.Second // a balance round every 1.25s: the relays share the partitions while the writers write
	}
	for i := range 3 {
		id := fmt.Sprintf("relay-%d", i)
		b.start(t, outbox.RelayConfig{Sink: sink.publisher(id), RelayID: id, BatchSize: 50, PollInterval: 5 * time.Millisecond,
			Leases: leases, Lease: lease})
	}
	if leases == outbox.LeasesPartitions {
		testutil.WaitFor(t, 10*time.Second, "the three relays share the partitions", func() bool {
			owners := b.owners(t)
			return owners["relay-0"] > 0 && owners["relay-1"] > 0 && owners["relay-2"] > 0
		})
	}

	var (
		mu        sync.Mutex
		committed []int64
		wg        sync.WaitGroup
	)
	deadline := time.Now().Add(3 * time.Second)
	for w := range 8 {
		wg.Go(func() {
			for n := 0; time.Now().Before(deadline); n++ {
				tx, err := b.pool.Begin(b.ctx)
				if err != nil {
					t.Error(err)
					return
				}
				res, err := b.writer.Write(b.ctx, tx,
					outbox.Message{EventType: "w", AggregateID: fmt.Sprintf("%d-%d", w, n), Payload: n},
					outbox.Message{EventType: "w", AggregateID: fmt.Sprintf("%d-%d", w, n), Payload: n})
				if err != nil {
					t.Error(err)
					_ = tx.Rollback(b.ctx)
					return
				}
				if n%5 == 4 { // some transactions roll back
					_ = tx.Rollback(b.ctx)
					continue
				}
				if err := tx.Commit(b.ctx); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				committed = append(committed, res.IDs...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.NotEmpty(t, committed)
	b.waitStats(t, "every committed event processed", func(s outbox.Stats) bool {
		return s.Processed == int64(len(committed)) && s.Pending == 0 && s.Processing == 0
	})

	sink.mu.Lock()
	defer sink.mu.Unlock()
	duplicates := 0
	for _, id := range committed {
		require.GreaterOrEqual(t, sink.delivered[id], 1, "event %d never delivered", id)
		duplicates += sink.delivered[id] - 1
	}
	require.Len(t, sink.delivered, len(committed), "a delivered event was never committed (ghost)")
	require.Zero(t, sink.overlaps.Load(), "an event was published by two relays at once")
	require.Zero(t, duplicates, "duplicates without any crash")
	t.Logf("%d events through 3 relays, 0 duplicates", len(committed))
}

// deadLetters records dead-lettered events and each batch's retry delays.
type deadLetters struct {
	mu     sync.Mutex
	events []outbox.Event
	errs   []error
}

func (d *deadLetters) OnDeadLetter(_ context.Context, e outbox.Event, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.events = append(d.events, e)
	d.errs = append(d.errs, err)
}

func (d *deadLetters) snapshot() ([]outbox.Event, []error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]outbox.Event(nil), d.events...), append([]error(nil), d.errs...)
}

// waitFor waits until the hook has seen n events, and returns what it saw:
// the hook runs after the move committed, so a moment after stats show it.
func (d *deadLetters) waitFor(t *testing.T, n int) ([]outbox.Event, []error) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, "the dead-letter hook", func() bool {
		events, _ := d.snapshot()
		return len(events) >= n
	})
	return d.snapshot()
}

// delayHook reads each failed event's delay (available_at - updated_at, both
// from the mark's now()) right after the batch settled.
type delayHook struct {
	pool   *pgxpool.Pool
	schema string
	mu     sync.Mutex
	delays []time.Duration
}

func (h *delayHook) OnBatch(ctx context.Context, b outbox.BatchInfo) {
	if b.Retried == 0 {
		return
	}
	var d time.Duration
	err := h.pool.QueryRow(ctx, `SELECT available_at - updated_at FROM `+testutil.Table(h.schema)+` WHERE id = $1`, b.Events[0].ID).Scan(&d)
	if err != nil {
		panic(err)
	}
	h.mu.Lock()
	h.delays = append(h.delays, d)
	h.mu.Unlock()
}

func TestRelayBackoffDeadLetterAndRetry(t *testing.T) {
	t.Parallel()
	forEachLeases(t, testRelayBackoffDeadLetterAndRetry)
}

func testRelayBackoffDeadLetterAndRetry(t *testing.T, leases outbox.Leases) {
	b := setupRelay(t)
	ids := b.write(t, 1, nil)
	rec := outboxtest.NewRecorder()
	rec.SetFail(func(outbox.Event) error { return errors.New("broker unavailable") })
	dead := &deadLetters{}
	delays := &delayHook{pool: b.pool, schema: b.schema}
	base := 100 * time.Millisecond
	b.start(t, outbox.RelayConfig{Sink: rec, MaxAttempts: 4, BackoffBase: base, BackoffMax: 500 * time.Millisecond,
		PollInterval: 10 * time.Millisecond, Hooks: []outbox.Hook{dead, delays}, Leases: leases})

	b.waitStats(t, "dead-lettered", func(s outbox.Stats) bool { return s.Failed == 1 })
	e, err := b.mgr.Event(b.ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, outbox.StatusFailed, e.Status)
	require.Equal(t, 4, e.Attempts, "exactly max attempts")
	require.Equal(t, "broker unavailable", e.LastError)

	// Retries after failures 1..3 wait base·2^n with jitter, capped at 500ms.
	delays.mu.Lock()
	got := append([]time.Duration(nil), delays.delays...)
	delays.mu.Unlock()
	require.Len(t, got, 3)
	for i, d := range got {
		want := min(base<<(i+1), 500*time.Millisecond)
		require.LessOrEqual(t, d, want, "delay after failure %d", i+1)
		require.GreaterOrEqual(t, d, want*3/4-time.Millisecond, "delay after failure %d", i+1)
	}

	deadEvents, deadErrs := dead.waitFor(t, 1)
	require.Len(t, deadEvents, 1)
	require.Equal(t, ids[0], deadEvents[0].ID)
	require.Equal(t, 4, deadEvents[0].Attempts)
	require.EqualError(t, deadErrs[0], "broker unavailable")

	// An operator retries it once the broker is back.
	rec.SetFail(nil)
	changed, err := b.mgr.Retry(b.ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, ids, changed)
	rec.WaitLen(t, 1, 10*time.Second)
	b.waitStats(t, "processed after retry", func(s outbox.Stats) bool { return s.Processed == 1 })
}

// TestRelayDeadLetterDropsTheRetryableNote: sinks mark errors the relay
// will retry "(retryable)"; the attempt that dead-letters the event stores
// its error without that note, which would mislead there.
func TestRelayDeadLetterDropsTheRetryableNote(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	ids := b.write(t, 1, nil)
	rec := outboxtest.NewRecorder()
	var calls atomic.Int64
	rec.SetFail(func(outbox.Event) error {
		return fmt.Errorf("webhook answered 503 (retryable) on call %d", calls.Add(1))
	})
	errs := &errorsSeen{pool: b.pool, schema: b.schema, id: ids[0]}
	b.start(t, outbox.RelayConfig{Sink: rec, MaxAttempts: 2, BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		PollInterval: 10 * time.Millisecond, Hooks: []outbox.Hook{errs}})
	b.waitStats(t, "dead-lettered", func(s outbox.Stats) bool { return s.Failed == 1 })
	e, err := b.mgr.Event(b.ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, "webhook answered 503 on call 2", e.LastError)
	require.Equal(t, []string{"webhook answered 503 (retryable) on call 1"}, errs.retrying(), "a retry keeps the note")
}

// errorsSeen records the stored last_error of one event after each batch
// that retried it.
type errorsSeen struct {
	pool   *pgxpool.Pool
	schema string
	id     int64
	mu     sync.Mutex
	seen   []string
}

func (h *errorsSeen) OnBatch(ctx context.Context, info outbox.BatchInfo) {
	if info.Retried == 0 {
		return
	}
	var msg string
	if err := h.pool.QueryRow(ctx, `SELECT last_error FROM `+pgx.Identifier{h.schema, "outbox_events"}.Sanitize()+` WHERE id = $1`, h.id).Scan(&msg); err != nil {
		msg = "error: " + err.Error()
	}
	h.mu.Lock()
	h.seen = append(h.seen, msg)
	h.mu.Unlock()
}

func (h *errorsSeen) retrying() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen...)
}

func TestRelayPermanentErrorDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	ids := b.write(t, 3, func(i int, m *outbox.Message) {
		if i == 1 {
			m.EventType = "poison"
		}
	})
	rec := outboxtest.NewRecorder()
	rec.SetFail(func(e outbox.Event) error {
		if e.EventType == "poison" {
			return outbox.Permanent(errors.New("HTTP 400: bad payload"))
		}
		return nil
	})
	dead := &deadLetters{}
	b.start(t, outbox.RelayConfig{Sink: rec, Hooks: []outbox.Hook{dead}})
	b.waitStats(t, "2 processed, 1 failed", func(s outbox.Stats) bool { return s.Processed == 2 && s.Failed == 1 })
	e, err := b.mgr.Event(b.ctx, ids[1])
	require.NoError(t, err)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, "HTTP 400: bad payload", e.LastError)
	deadEvents, deadErrs := dead.waitFor(t, 1)
	require.Len(t, deadEvents, 1)
	require.True(t, outbox.IsPermanent(deadErrs[0]))
}

func TestRelayPerEventMaxAttempts(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	ids := b.write(t, 1, func(_ int, m *outbox.Message) { m.MaxAttempts = 1 })
	rec := outboxtest.NewRecorder()
	rec.SetFail(func(outbox.Event) error { return errors.New("nope") })
	b.start(t, outbox.RelayConfig{Sink: rec, MaxAttempts: 10})
	b.waitStats(t, "failed after its own single attempt", func(s outbox.Stats) bool { return s.Failed == 1 })
	e, err := b.mgr.Event(b.ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, 1, e.Attempts)
}

func TestRelaySinkPanicsAndBadResultsAreRetryable(t *testing.T) {
	t.Parallel()
	cases := map[string]outbox.SinkFunc{
		"panic":        func(context.Context, []outbox.Event) []error { panic("boom") },
		"wrong length": func(context.Context, []outbox.Event) []error { return []error{} },
	}
	for name, sink := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupRelay(t)
			ids := b.write(t, 2, nil)
			b.start(t, outbox.RelayConfig{Sink: sink, BackoffBase: time.Hour, BackoffMax: time.Hour})
			testutil.WaitFor(t, 10*time.Second, "attempt recorded", func() bool {
				e, err := b.mgr.Event(b.ctx, ids[1])
				require.NoError(t, err)
				return e.Attempts == 1
			})
			e, err := b.mgr.Event(b.ctx, ids[0])
			require.NoError(t, err)
			require.Equal(t, outbox.StatusPending, e.Status)
			require.NotEmpty(t, e.LastError)
		})
	}
}

func TestRelayRescuesExpiredLease(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	ids := b.write(t, 5, nil)
	// A relay that died mid-batch left these leased and expired.
	_, err := b.pool.Exec(b.ctx, `UPDATE `+testutil.Table(b.schema)+
		` SET status = 'processing', locked_by = 'dead-relay', locked_until = now() - interval '1 second'`)
	require.NoError(t, err)
	rec := outboxtest.NewRecorder()
	b.start(t, outbox.RelayConfig{Sink: rec, RescueInterval: 50 * time.Millisecond})
	rec.WaitLen(t, 5, 10*time.Second)
	b.waitStats(t, "all processed", func(s outbox.Stats) bool { return s.Processed == 5 })
	e, err := b.mgr.Event(b.ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, 1, e.Attempts, "the expiry counts as an attempt")
	require.Equal(t, 1, e.LeaseExpiries)
	require.Contains(t, e.LastError, "dead-relay")
	require.Equal(t, 5, rec.Calls(), "each rescued event is published alone")
}

// TestRelayRescueDeadLettersAndReports: the rescue dead-letters an event
// whose expiry used up its last attempt, and reports it to the dead-letter
// and rescue hooks.
func TestRelayRescueDeadLettersAndReports(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	ids := b.write(t, 3, nil)
	// A relay that died holding them; the first was on its last attempt.
	_, err := b.pool.Exec(b.ctx, `UPDATE `+testutil.Table(b.schema)+
		` SET status = 'processing', locked_by = 'dead-relay', locked_until = now() - interval '1 second'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE `+testutil.Table(b.schema)+` SET attempts = 2, lease_expiries = 2 WHERE id = $1`, ids[0])
	require.NoError(t, err)
	hook := &rescueRecorder{dead: make(chan deadLetter, 3), rescues: make(chan outbox.RescueInfo, 10)}
	b.start(t, outbox.RelayConfig{Sink: outboxtest.NewRecorder(), RelayID: "heir", MaxAttempts: 3,
		RescueInterval: 50 * time.Millisecond, Hooks: []outbox.Hook{hook}})
	var d deadLetter
	select {
	case d = <-hook.dead:
	case <-time.After(10 * time.Second):
		t.Fatal("no dead letter")
	}
	require.Equal(t, ids[0], d.event.ID)
	require.ErrorIs(t, d.err, outbox.ErrLeaseExpired)
	require.Equal(t, outbox.StatusFailed, d.event.Status)
	require.Equal(t, 3, d.event.Attempts)
	require.Equal(t, 3, d.event.LeaseExpiries)
	require.Contains(t, d.event.LastError, "dead-lettered after 3 attempts, 3 of them ending in a lease expiry")
	info := <-hook.rescues
	require.Equal(t, "heir", info.RelayID)
	require.Equal(t, ids[1:], info.Rescued)
	require.Len(t, info.Dead, 1)
	b.waitStats(t, "the others processed", func(s outbox.Stats) bool { return s.Processed == 2 && s.Failed == 1 })
}

// TestRelayMaxBatchBytes: with a byte budget, no published batch holds
// more payload than the budget allows, except a single event; without one,
// a batch is bounded by BatchSize only.
func TestRelayMaxBatchBytes(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	b.write(t, 10, func(i int, m *outbox.Message) {
		m.Payload = strings.Repeat("x", 1000)
		if i == 4 {
			// Alone over the budget, and incompressible: PostgreSQL
			// counts stored (compressed) bytes.
			big := make([]byte, 3750)
			_, _ = rand.Read(big)
			m.Payload = base64.StdEncoding.EncodeToString(big)
		}
	})
	var mu sync.Mutex
	var batches [][]int
	hook := batchHook(func(info outbox.BatchInfo) {
		sizes := make([]int, len(info.Events))
		for i, e := range info.Events {
			sizes[i] = len(e.Payload)
		}
		mu.Lock()
		batches = append(batches, sizes)
		mu.Unlock()
	})
	b.start(t, outbox.RelayConfig{Sink: outboxtest.NewRecorder(), BatchSize: 100, MaxBatchBytes: 3100, Hooks: []outbox.Hook{hook}})
	b.waitStats(t, "all processed", func(s outbox.Stats) bool { return s.Processed == 10 })
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, sizes := range batches {
		sum := 0
		for _, n := range sizes {
			sum += n
		}
		total += len(sizes)
		require.True(t, sum <= 3100 || len(sizes) == 1, "a batch of %v bytes", sizes)
	}
	require.Equal(t, 10, total)
	require.GreaterOrEqual(t, len(batches), 4, "%v", batches)
}

type batchHook func(outbox.BatchInfo)

func (h batchHook) OnBatch(_ context.Context, info outbox.BatchInfo) { h(info) }

type deadLetter struct {
	event outbox.Event
	err   error
}

type rescueRecorder struct {
	dead    chan deadLetter
	rescues chan outbox.RescueInfo
}

func (r *rescueRecorder) OnDeadLetter(_ context.Context, e outbox.Event, err error) {
	r.dead <- deadLetter{e, err}
}

func (r *rescueRecorder) OnRescue(_ context.Context, info outbox.RescueInfo) { r.rescues <- info }

func TestRelayLiveLeaseIsNotTaken(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	b.write(t, 3, nil)
	_, err := b.pool.Exec(b.ctx, `UPDATE `+testutil.Table(b.schema)+
		` SET status = 'processing', locked_by = 'other', locked_until = now() + interval '1 hour'`)
	require.NoError(t, err)
	rec := outboxtest.NewRecorder()
	r := b.start(t, outbox.RelayConfig{Sink: rec, RescueInterval: 10 * time.Millisecond, PollInterval: 10 * time.Millisecond})
	// Let the relay claim and rescue many times over.
	b.write(t, 1, nil)
	rec.WaitLen(t, 1, 10*time.Second)
	for range 20 {
		r.Wake()
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, 1, rec.Len(), "published an event another relay holds a live lease on")
	require.EqualValues(t, 3, b.stats(t).Processing)
}

// blockingSink blocks every publish until its context ends or release is
// closed.
type blockingSink struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func newBlockingSink() *blockingSink {
	return &blockingSink{started: make(chan struct{}), release: make(chan struct{})}
}

func (s *blockingSink) Publish(ctx context.Context, events []outbox.Event) []error {
	s.once.Do(func() { close(s.started) })
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return outbox.BatchError(len(events), ctx.Err())
	}
}

func TestRelayStopFinishesInFlightBatch(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	b.write(t, 10, nil)
	sink := newBlockingSink()
	r, err := outbox.NewRelay(b.db, outbox.RelayConfig{Sink: sink, Schema: b.schema, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.NoError(t, r.Start(b.ctx))
	<-sink.started

	stopped := make(chan error)
	go func() { stopped <- r.Stop(context.Background()) }()
	close(sink.release) // the in-flight publish completes during the stop
	require.NoError(t, <-stopped)
	s := b.stats(t)
	require.EqualValues(t, 10, s.Processed)
	require.Zero(t, s.Processing)
}

func TestRelayHardStopReleasesWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	ids := b.write(t, 10, nil)
	sink := newBlockingSink()
	r, err := outbox.NewRelay(b.db, outbox.RelayConfig{Sink: sink, Schema: b.schema, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.NoError(t, r.Start(b.ctx))
	<-sink.started

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, r.Stop(ctx), context.DeadlineExceeded)
	s := b.stats(t)
	require.EqualValues(t, 10, s.Pending)
	require.Zero(t, s.Processing)
	e, err := b.mgr.Event(b.ctx, ids[0])
	require.NoError(t, err)
	require.Zero(t, e.Attempts)
}

func TestRelayRunStopsOnContextCancel(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	b.write(t, 3, nil)
	rec := outboxtest.NewRecorder()
	r, err := outbox.NewRelay(b.db, outbox.RelayConfig{Sink: rec, Schema: b.schema, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	rec.WaitLen(t, 3, 10*time.Second)
	cancel()
	require.NoError(t, <-done)

	// A context that ends while the relay starts (a SIGTERM during start-up)
	// is a clean stop too: Start fails, Run does not.
	r, err = outbox.NewRelay(b.db, outbox.RelayConfig{Sink: rec, Schema: b.schema, RelayID: "never-started",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.Error(t, r.Start(ctx))
	require.NoError(t, r.Run(ctx))
	relays, err := b.mgr.Relays(b.ctx)
	require.NoError(t, err)
	require.Empty(t, relays, "no row left behind")
}

func TestRelaySurvivesTerminatedConnections(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	appName := "outbox-relay:" + b.schema
	relayPool := testutil.NewPool(t, appName)
	terminate := func() int {
		var killed int
		err := b.pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, appName).Scan(&killed)
		require.NoError(t, err)
		return killed
	}
	rec := outboxtest.NewRecorder()
	var calls, killedMidBatch atomic.Int64
	// Every third batch loses its connections between publish and mark, so
	// the marks must survive a reconnect.
	sink := outbox.SinkFunc(func(ctx context.Context, events []outbox.Event) []error {
		if calls.Add(1)%3 == 0 {
			killedMidBatch.Add(int64(terminate()))
		}
		return rec.Publish(ctx, events)
	})
	startRelay(t, outbox.Postgres(relayPool), b.schema, outbox.RelayConfig{Sink: sink, BatchSize: 10, PollInterval: 5 * time.Millisecond})

	total := 0
	killedIdle := 0
	for range 10 {
		total += len(b.write(t, 20, nil))
		rec.WaitLen(t, total, 20*time.Second)
		// Also kill the connections between batches, once the pool is back.
		testutil.WaitFor(t, 10*time.Second, "relay reconnected", func() bool {
			var n int
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, appName).Scan(&n))
			return n > 0
		})
		killedIdle += terminate()
	}
	b.waitStats(t, "everything processed after connection kills", func(s outbox.Stats) bool {
		return s.Processed == int64(total) && s.Processing == 0
	})
	require.Positive(t, killedIdle)
	require.Positive(t, killedMidBatch.Load())
	var attempts int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT coalesce(sum(attempts), 0) FROM `+testutil.Table(b.schema)).Scan(&attempts))
	require.Zero(t, attempts, "database errors spent attempts")
	t.Logf("terminated %d idle and %d mid-batch relay connections; %d events processed", killedIdle, killedMidBatch.Load(), total)
}

func TestRelayConfigValidation(t *testing.T) {
	t.Parallel()
	db := outbox.Postgres(nil)
	sink := outboxtest.NewRecorder()
	cases := []struct {
		cfg   outbox.RelayConfig
		field string
	}{
		{outbox.RelayConfig{}, "Sink"},
		{outbox.RelayConfig{Sink: sink, Lease: 5 * time.Second, SinkTimeout: 5 * time.Second}, "SinkTimeout"},
		{outbox.RelayConfig{Sink: sink, Lease: 5 * time.Second, SinkTimeout: 6 * time.Second}, "SinkTimeout"},
		{outbox.RelayConfig{Sink: sink, BatchSize: outbox.BatchSizeMax + 1}, "BatchSize"},
		{outbox.RelayConfig{Sink: sink, BackoffBase: time.Minute, BackoffMax: time.Second}, "BackoffMax"},
		{outbox.RelayConfig{Sink: sink, Hooks: []outbox.Hook{42}}, "Hooks"},
		{outbox.RelayConfig{Sink: sink, Lease: 10 * time.Second, ShutdownTimeout: 10 * time.Second}, "ShutdownTimeout"},
		{outbox.RelayConfig{Sink: sink, MaxBatchBytes: -1}, "MaxBatchBytes"},
		{outbox.RelayConfig{Sink: sink, Workers: 4, MaxInFlight: 2}, "MaxInFlight"},
		{outbox.RelayConfig{Sink: sink, MaxInFlight: outbox.MaxInFlightMax + 1}, "MaxInFlight"},
		{outbox.RelayConfig{Sink: sink, MaxInFlightBytes: -1}, "MaxInFlightBytes"},
		{outbox.RelayConfig{Sink: sink, RelayID: "relay\x00one"}, "RelayID"},
		{outbox.RelayConfig{Sink: sink, RelayID: "relay\xff"}, "RelayID"},
		{outbox.RelayConfig{Sink: sink, RelayID: strings.Repeat("r", 256)}, "RelayID"},
	}
	for _, c := range cases {
		_, err := outbox.NewRelay(db, c.cfg)
		var ce *outbox.ConfigError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, c.field, ce.Field, err.Error())
	}
	cfg := outbox.RelayConfig{Sink: sink}.WithDefaults()
	require.Equal(t, outbox.LeaseDefault, cfg.Lease)
	require.Less(t, cfg.SinkTimeout, cfg.Lease)
	require.Equal(t, outbox.MaxInFlightDefault, cfg.MaxInFlight)
	require.NoError(t, cfg.Validate())
	cfg = outbox.RelayConfig{Sink: sink, Workers: 8}.WithDefaults()
	require.Equal(t, 8, cfg.MaxInFlight, "at least one batch per worker")
}

func TestRelayStartWithoutTable(t *testing.T) {
	t.Parallel()
	r, err := outbox.NewRelay(outbox.Postgres(testutil.Pool(t)), outbox.RelayConfig{Sink: outboxtest.NewRecorder(), Schema: testutil.EmptySchemaName(t)})
	require.NoError(t, err)
	err = r.Start(context.Background())
	require.ErrorIs(t, err, outbox.ErrNoTable)
	require.Contains(t, err.Error(), "run outbox migrate")
}

func TestRelayEventTypeFilterClaimsOnlyMatchingTypes(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	types := []string{"order.created", "order.paid", "user.created", "odd%type", "odd_type", "oddXtype"}
	b.write(t, len(types), func(i int, m *outbox.Message) { m.EventType = types[i] })
	orders, odd := outboxtest.NewRecorder(), outboxtest.NewRecorder()
	b.start(t, outbox.RelayConfig{Sink: orders, RelayID: "orders", EventTypes: []string{"order.*"}})
	b.start(t, outbox.RelayConfig{Sink: odd, RelayID: "odd", EventTypes: []string{"odd%type", "odd_type"}})
	b.waitStats(t, "4 processed", func(s outbox.Stats) bool { return s.Processed == 4 })

	got := func(r *outboxtest.Recorder) []string {
		var out []string
		for _, e := range r.Events() {
			out = append(out, e.EventType)
		}
		return out
	}
	require.ElementsMatch(t, []string{"order.created", "order.paid"}, got(orders))
	require.ElementsMatch(t, []string{"odd%type", "odd_type"}, got(odd), "% and _ match themselves")
	// user.created and oddXtype are left for another relay, never leased.
	s := b.stats(t)
	require.EqualValues(t, 2, s.Pending)
	require.Zero(t, s.Processing)
}

// tracingHook rewrites each event's traceparent before the sink sees it and
// records the results it is told.
type tracingHook struct {
	mu      sync.Mutex
	results map[int64]error
}

func (h *tracingHook) OnPublish(_ context.Context, e *outbox.Event) func(error) {
	if e.Headers == nil {
		e.Headers = map[string]string{}
	}
	e.Headers[outbox.HeaderTraceParent] = fmt.Sprintf("span-for-%d", e.ID)
	return func(err error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.results[e.ID] = err
	}
}

func TestRelayPublishHookSeesEveryEventAndResult(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	ids := b.write(t, 3, nil)
	rec := outboxtest.NewRecorder()
	rec.SetFail(func(e outbox.Event) error {
		if e.ID == ids[1] {
			return outbox.Permanent(errors.New("rejected"))
		}
		return nil
	})
	hook := &tracingHook{results: map[int64]error{}}
	b.start(t, outbox.RelayConfig{Sink: rec, Hooks: []outbox.Hook{hook}})
	b.waitStats(t, "settled", func(s outbox.Stats) bool { return s.Processed == 2 && s.Failed == 1 })
	for _, e := range rec.Events() {
		require.Equal(t, fmt.Sprintf("span-for-%d", e.ID), e.Headers[outbox.HeaderTraceParent])
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	require.Len(t, hook.results, 3)
	require.NoError(t, hook.results[ids[0]])
	require.EqualError(t, hook.results[ids[1]], "rejected")
	stored, err := b.mgr.Event(b.ctx, ids[0])
	require.NoError(t, err)
	require.Empty(t, stored.Headers[outbox.HeaderTraceParent], "the hook's change is not stored")
}

func TestRelayRetentionModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []outbox.Retention{outbox.RetainDelete, outbox.RetainArchive} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			forEachLeases(t, func(t *testing.T, leases outbox.Leases) {
				b := setupRelay(t)
				ids := b.write(t, 20, nil)
				rec := outboxtest.NewRecorder()
				b.start(t, outbox.RelayConfig{Sink: rec, Retention: mode, Leases: leases})
				rec.WaitLen(t, 20, 10*time.Second)
				b.waitStats(t, "table emptied", func(s outbox.Stats) bool { return s.Pending+s.Processing+s.Processed == 0 })
				_, err := b.mgr.Event(b.ctx, ids[0])
				require.ErrorIs(t, err, outbox.ErrNotFound)
				var archived int
				require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+pgx.Identifier{b.schema, "outbox_events_archive"}.Sanitize()).Scan(&archived))
				if mode == outbox.RetainArchive {
					require.Equal(t, 20, archived)
				} else {
					require.Zero(t, archived)
				}
			})
		})
	}
	_, err := outbox.ParseRetention("forever")
	require.ErrorContains(t, err, "use processed, delete or archive")
}
