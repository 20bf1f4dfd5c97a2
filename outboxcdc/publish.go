package outboxcdc

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/backoff"
	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/errtext"
)

// failure is one event's failed publish from the stream.
type failure struct {
	id  int64
	err error
}

// settleMax bounds the IDs one settlement marks: large batches, a bounded
// statement.
const settleMax = 10000

// settleQueue passes the publisher's outcomes to the settler. The
// publisher never waits for the settler: its outcomes merge into one
// pending settlement (IDs only), so a slow mark delays the confirmed
// position, not delivery. The settler takes the whole of it once per
// SettleInterval, so a stream of small transactions costs one wake-up of
// the settler per interval, not one per publish.
type settleQueue struct {
	mu      sync.Mutex
	pending *settlement
	closed  bool          // the publisher is done
	dead    bool          // the settler is gone: outcomes are dropped (replayed)
	ready   chan struct{} // a signal that pending or closed changed (capacity 1)
	done    chan struct{} // closed with closed
}

func newSettleQueue() *settleQueue {
	return &settleQueue{ready: make(chan struct{}, 1), done: make(chan struct{})}
}

// add merges s, published after everything added before, into the
// pending settlement.
func (q *settleQueue) add(s settlement) {
	q.mu.Lock()
	switch {
	case q.dead:
	case q.pending == nil:
		q.pending = &s
	default:
		q.pending.merge(s)
	}
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// close tells the settler that nothing more comes.
func (q *settleQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	close(q.done)
}

// take returns the pending settlement (nil when none) and whether the
// publisher is done.
func (q *settleQueue) take() (*settlement, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.pending
	q.pending = nil
	return s, q.closed
}

// abandon drops what is pending and what comes: the settler stops
// without confirming it.
func (q *settleQueue) abandon() {
	q.mu.Lock()
	q.dead, q.pending = true, nil
	q.mu.Unlock()
}

// publishLoop publishes the chunks in order, a batch of up to BatchSize
// events at a time (what queued while the last publish ran), and hands
// the outcomes to the settler in the same order.
func (r *Relay) publishLoop(ctx context.Context, chunks <-chan chunk, settles *settleQueue) {
	defer settles.close()
	var held *chunk // a chunk taken that did not fit the last batch
	for {
		var first chunk
		if held != nil {
			first, held = *held, nil
		} else {
			c, ok := <-chunks
			if !ok {
				return
			}
			first = c
		}
		batch := []chunk{first}
		n := len(first.events)
	fill:
		for n < r.cfg.BatchSize {
			select {
			case c, ok := <-chunks:
				if !ok {
					break fill
				}
				if n > 0 && n+len(c.events) > r.cfg.BatchSize {
					held = &c
					break fill
				}
				batch = append(batch, c)
				n += len(c.events)
			default:
				break fill
			}
		}
		s, ok := r.publish(ctx, batch, n)
		if !ok {
			return // stopped while the sink was unavailable: replayed later
		}
		settles.add(s)
	}
}

// merge appends more, published after s, to s.
func (s *settlement) merge(more settlement) {
	s.txids = append(s.txids, more.txids...)
	s.delivered = append(s.delivered, more.delivered...)
	s.failures = append(s.failures, more.failures...)
	if more.end > s.end {
		s.end = more.end
	}
	s.seq = more.seq
}

// publish sends a batch. While the sink reports every event unavailable
// (outbox.Unavailable) it waits and tries again, spending no attempts and
// keeping the order; any other failure goes to the table path with its
// failure mark.
func (r *Relay) publish(ctx context.Context, batch []chunk, n int) (settlement, bool) {
	events := make([]outbox.Event, 0, n)
	var s settlement
	for _, c := range batch {
		events = append(events, c.events...)
		s.txids = append(s.txids, c.txids...)
		s.failures = append(s.failures, c.bad...)
		if c.end > s.end {
			s.end = c.end
		}
		s.seq = c.seq
	}
	if len(events) == 0 {
		return s, true
	}
	for attempt := 0; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, r.cfg.SinkTimeout)
		errs := r.cfg.Sink.Publish(pctx, events)
		cancel()
		if errs != nil && len(errs) != len(events) {
			errs = outbox.BatchError(len(events), fmt.Errorf("sink returned %d results for %d events", len(errs), len(events)))
		}
		if allUnavailable(errs) {
			wait := backoff.Exponential(attempt, 100*time.Millisecond, 5*time.Second)
			if attempt == 0 {
				r.log.Warn("sink unavailable; holding the stream until it answers",
					slog.String("error", errs[0].Error()), slog.Int("batch_size", len(events)))
			}
			select {
			case <-ctx.Done():
				return s, false
			case <-time.After(wait):
			}
			continue
		}
		delivered := 0
		for i := range events {
			if errs == nil || errs[i] == nil {
				s.delivered = append(s.delivered, events[i].ID)
				delivered++
			} else {
				s.failures = append(s.failures, failure{id: events[i].ID, err: errs[i]})
			}
		}
		if r.cfg.OnPublish != nil {
			r.cfg.OnPublish(delivered, len(events)-delivered)
		}
		return s, true
	}
}

func allUnavailable(errs []error) bool {
	if len(errs) == 0 {
		return false
	}
	for _, err := range errs {
		if err == nil || !outbox.IsUnavailable(err) {
			return false
		}
	}
	return true
}

// settleLoop marks what was published, once per SettleInterval at most
// (what was published meanwhile in one transaction), and advances the
// confirmed position past it once it committed. A failed mark is retried
// until it succeeds or the stream ends (then the events are replayed: at
// least once).
func (r *Relay) settleLoop(ctx context.Context, settles *settleQueue) {
	gather := time.NewTimer(r.cfg.SettleInterval)
	defer gather.Stop()
	for {
		select {
		case <-settles.ready:
		case <-settles.done:
		}
		s, closed := settles.take()
		if s == nil && !closed {
			continue
		}
		if s != nil && !closed && len(s.delivered)+len(s.failures) < settleMax {
			// Gather for SettleInterval: one mark for many publishes.
			gather.Reset(r.cfg.SettleInterval)
			select {
			case <-gather.C:
			case <-settles.done:
				gather.Stop()
			}
			more, c := settles.take()
			if more != nil {
				s.merge(*more)
			}
			closed = c
		}
		if s != nil {
			if !r.settle(ctx, *s) {
				settles.abandon() // not confirmed: what follows is replayed
				return
			}
			if s.end > 0 {
				r.advance(s.end)
			}
			r.settledSeq.Store(s.seq)
		}
		if closed {
			// take saw the close under the lock that add holds: nothing
			// was added after it.
			return
		}
	}
}

// settle writes one settlement, retrying a failed write with backoff.
func (r *Relay) settle(ctx context.Context, s settlement) bool {
	if len(s.delivered) == 0 && len(s.failures) == 0 {
		return true
	}
	fails := make([]driver.Failure, len(s.failures))
	for i, f := range s.failures {
		fails[i] = driver.Failure{ID: f.id, Error: errtext.Sanitize(f.err.Error(), errtext.MaxLen),
			Permanent: outbox.IsPermanent(f.err), Delay: backoff.Exponential(1, r.cfg.BackoffBase, r.cfg.BackoffMax)}
	}
	for attempt := 0; ; attempt++ {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		res, err := r.drv.CaptureSettle(sctx, r.slot.Name, r.cfg.RelayID, driver.Retention(r.cfg.Retention),
			s.txids, s.delivered, r.cfg.MaxAttempts, fails)
		cancel()
		if err == nil {
			if len(res.Retried) > 0 || len(res.Dead) > 0 {
				r.log.Warn("publishes from the stream failed; the table path retries them",
					slog.Int("retried", len(res.Retried)), slog.Int("dead_lettered", len(res.Dead)),
					slog.String("error", fails[0].Error))
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		r.log.Warn("marking streamed events failed; retrying", slog.String("error", err.Error()),
			slog.Int("events", len(s.delivered)+len(s.failures)))
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff.Exponential(attempt, 100*time.Millisecond, 5*time.Second)):
		}
	}
}

// lagLoop reads the slot's retained WAL every LagInterval, reports it and
// warns beyond MaxSlotLag, and reports a slot nobody streams from.
func (r *Relay) lagLoop(ctx context.Context) {
	tick := time.NewTicker(r.cfg.LagInterval)
	defer tick.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		lag, found, err := r.drv.ReplicationSlotLag(lctx, r.slot.Name)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			r.log.Debug("reading the slot's lag failed", slog.String("error", err.Error()))
		case !found:
			r.log.Error("the replication slot is gone: the capture relay recreates it on restart; events written meanwhile are left to the table path",
				slog.String("slot", r.slot.Name))
		default:
			if r.cfg.OnSlotLag != nil {
				r.cfg.OnSlotLag(lag.RetainedBytes)
			}
			if r.cfg.MaxSlotLag > 0 && lag.RetainedBytes > r.cfg.MaxSlotLag {
				r.log.Warn("REPLICATION SLOT LAG: the slot retains more WAL than --max-slot-lag; the server's disk fills while it grows: check the sink and the capture relays, or drop the slot with outbox migrate --drop-logical",
					slog.String("slot", r.slot.Name), slog.Int64("retained_bytes", lag.RetainedBytes),
					slog.Int64("max_slot_lag", r.cfg.MaxSlotLag), slog.Bool("active", lag.Active),
					slog.String("wal_status", lag.WALStatus), slog.String("confirmed_lsn", pglogrepl.LSN(r.confirmed.Load()).String()))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
