package outboxcdc

import (
	"context"
	"fmt"
	"log/slog"
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

// publishLoop publishes the chunks in order, a batch of up to BatchSize
// events at a time (what queued while the last publish ran), and hands
// the outcomes to the settler in the same order. It never waits for the
// settler: while the settler is busy, the outcomes merge into one
// settlement (IDs only), so a slow mark delays the confirmed position, not
// delivery.
func (r *Relay) publishLoop(ctx context.Context, chunks <-chan chunk, settles chan<- settlement) {
	defer close(settles)
	var (
		held    *chunk      // a chunk taken that did not fit the last batch
		pending *settlement // outcomes the settler has not taken yet
	)
	defer func() {
		if pending != nil {
			select {
			case settles <- *pending:
			case <-ctx.Done():
			}
		}
	}()
	for {
		var first chunk
		if held != nil {
			first, held = *held, nil
		} else {
			var out chan<- settlement // nil, so never chosen, without pending
			var s settlement
			if pending != nil {
				out, s = settles, *pending
			}
			select {
			case c, ok := <-chunks:
				if !ok {
					return
				}
				first = c
			case out <- s:
				pending = nil
				continue
			}
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
		if pending != nil {
			pending.merge(s)
		} else {
			pending = &s
		}
		select {
		case settles <- *pending:
			pending = nil
		default:
		}
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

// settleLoop marks what was published, merging the settlements queued
// meanwhile into one transaction, and advances the confirmed position past
// them once it committed. A failed mark is retried until it succeeds or
// the stream ends (then the events are replayed: at least once).
func (r *Relay) settleLoop(ctx context.Context, settles <-chan settlement) {
	for s := range settles {
		// Gather for SettleInterval: one mark for many publishes.
		gather := time.NewTimer(r.cfg.SettleInterval)
	merge:
		for len(s.delivered)+len(s.failures) < settleMax {
			select {
			case more, ok := <-settles:
				if !ok {
					break merge
				}
				s.merge(more)
			case <-gather.C:
				break merge
			}
		}
		gather.Stop()
		if !r.settle(ctx, s) {
			// Drain without confirming: what follows is replayed.
			for range settles {
			}
			return
		}
		if s.end > 0 {
			r.advance(s.end)
		}
		r.settledSeq.Store(s.seq)
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
