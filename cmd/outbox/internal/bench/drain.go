package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox"
)

// stallTimeout ends a drain that has made no progress for this long: a
// stuck relay must not hang the bench.
const stallTimeout = time.Minute

// Drain pre-fills Events events and drains them with outbox.Relay (BatchSize,
// Workers, PollInterval, the given retention) to the sink. The report's
// EventsPerS is Events over the time from the relay's start until the last
// batch was marked. Its DrainStats is left for Run to fill in.
func (r *Runner) Drain(ctx context.Context, retention outbox.Retention) (Report, error) {
	return r.drain(ctx, retention, 0, nil, "")
}

// drain is Drain; with keys > 0, an ordered drain (OrderingAggregate) of
// events spread over that many aggregates. A non-nil sink
// replaces Config.Sink, and sinkName names it in Report.Sink.
func (r *Runner) drain(ctx context.Context, retention outbox.Retention, keys int, sink outbox.Sink, sinkName string) (Report, error) {
	rep := Report{Scenario: ScenarioDrain, Retention: string(retention), Sink: sinkName}
	if sink == nil {
		sink = r.cfg.Sink
	}
	ordering := outbox.OrderingNone
	if keys > 0 {
		rep.Ordering, rep.Keys, ordering = string(outbox.OrderingAggregate), keys, outbox.OrderingAggregate
	}
	err := r.withScratch(ctx, &rep, func(s scratch) error {
		r.progress("drain (%s, ordering %s): pre-filling %d events", retention, ordering, r.cfg.Events)
		if err := s.prefill(ctx, r.cfg.Events, r.payload, keys); err != nil {
			return err
		}
		before, err := s.tableSize(ctx)
		if err != nil {
			return err
		}
		rep.Table.Before = before

		p := s.pools()
		defer p.close(ctx)
		relayID := "bench:" + s.name()
		db, err := p.relay(ctx, relayID, r.cfg.MaxInFlight+2)
		if err != nil {
			return err
		}
		rec := newRecorder(sink, r.cfg.Events)
		progress := &drainProgress{target: int64(r.cfg.Events), done: make(chan struct{}), failed: make(chan struct{})}
		relay, err := outbox.NewRelay(db, outbox.RelayConfig{
			Sink: rec, Schema: s.schema(), RelayID: relayID, BatchSize: r.cfg.BatchSize, Workers: r.cfg.Workers,
			MaxInFlight: r.cfg.MaxInFlight, PollInterval: r.cfg.PollInterval, Retention: retention, Logger: r.cfg.Logger, Hooks: []outbox.Hook{progress},
			Ordering: ordering, Leases: r.cfg.Leases,
		})
		if err != nil {
			return err
		}
		r.progress("drain (%s): relaying %d events to %s", retention, r.cfg.Events, cmp.Or(sinkName, r.cfg.SinkName))
		rss := startRSS()
		start := time.Now()
		if err := relay.Start(ctx); err != nil {
			rss.Stop()
			return err
		}
		waitErr := progress.wait(ctx)
		elapsed := time.Since(start)
		stopErr := stopRelay(ctx, &benchRelay{Relay: relay})
		rss.stopInto(&rep)
		if sinkErr := rec.err(); sinkErr != nil {
			waitErr = sinkErr // says more than errSinkFailed
		}
		if err := errors.Join(waitErr, stopErr); err != nil {
			return fmt.Errorf("drain (%s): %w", retention, err)
		}
		p.close(ctx)

		if err := r.verifyDrained(ctx, s, retention); err != nil {
			return fmt.Errorf("drain (%s): %w", retention, err)
		}
		if rep.Table.After, err = s.tableSize(ctx); err != nil {
			return err
		}
		delivered, dups, _ := rec.counts()
		rep.Events, rep.Duplicates, rep.Seconds = delivered, dups, elapsed.Seconds()
		rep.EventsPerS = float64(delivered) / elapsed.Seconds()
		return nil
	})
	return rep, err
}

// verifyDrained checks that every pre-filled event ended where retention
// puts delivered events.
func (r *Runner) verifyDrained(ctx context.Context, s scratch, retention outbox.Retention) error {
	c, err := s.statuses(ctx)
	if err != nil {
		return err
	}
	want := int64(r.cfg.Events)
	var got int64
	switch retention {
	case outbox.RetainDelete:
		got = want - c.remaining
	case outbox.RetainArchive:
		got = c.archived
	default:
		got = c.processed
	}
	if c.undelivered != 0 || got != want {
		return fmt.Errorf("%d of %d events delivered as retention %s expects, %d undelivered", got, want, retention, c.undelivered)
	}
	return nil
}

// stopRelay stops the relay gracefully, bounded by its shutdown timeout;
// a capture relay's stream first.
func stopRelay(ctx context.Context, relay *benchRelay) error {
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), relay.Config().ShutdownTimeout)
	defer cancel()
	var streamErr error
	if relay.stopStream != nil {
		streamErr = relay.stopStream(stopCtx)
	}
	if err := relay.Stop(stopCtx); err != nil {
		return errors.Join(streamErr, fmt.Errorf("stop relay: %w", err))
	}
	return streamErr
}

// drainProgress is a relay hook that counts marked events and closes done
// when target are marked, or failed when a publish failed.
type drainProgress struct {
	target     int64
	marked     atomic.Int64
	done       chan struct{}
	failed     chan struct{}
	doneOnce   sync.Once
	failedOnce sync.Once
}

func (d *drainProgress) OnBatch(_ context.Context, b outbox.BatchInfo) {
	if b.Retried+b.Dead > 0 {
		d.failedOnce.Do(func() { close(d.failed) })
	}
	if d.marked.Add(int64(b.Published)) >= d.target {
		d.doneOnce.Do(func() { close(d.done) })
	}
}

// wait returns when every event is marked, a publish failed, ctx ended or
// the drain stalled.
func (d *drainProgress) wait(ctx context.Context) error {
	return waitMarked(ctx, d.done, d.failed, d.marked.Load)
}

// waitMarked waits for done; it fails on failed, on ctx, and when marked()
// has not moved for stallTimeout.
func waitMarked(ctx context.Context, done, failed <-chan struct{}, marked func() int64) error {
	check := time.NewTicker(time.Second)
	defer check.Stop()
	last, lastMove := marked(), time.Now()
	for {
		select {
		case <-done:
			return nil
		case <-failed:
			return errSinkFailed
		case <-ctx.Done():
			return ctx.Err()
		case now := <-check.C:
			if n := marked(); n != last {
				last, lastMove = n, now
			} else if now.Sub(lastMove) >= stallTimeout {
				return fmt.Errorf("no progress for %v after %d events", stallTimeout, n)
			}
		}
	}
}
