package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
)

// Steady measures what a running relay costs the application: Writers
// goroutines write flat out for Duration/2 without a relay, the tables are
// emptied, they write for Duration while the relay runs, the tables are
// emptied again and they write for another Duration/2 without a relay. The
// two relay-less halves bracket the relay phase, so a machine that speeds up
// or slows down during the run shifts both sides of the ratio alike. The
// report's EventsPerS is the relay's delivery rate in the relay phase.
// Every event committed in the relay phase must end up delivered or still
// pending, or Steady fails.
func (r *Runner) Steady(ctx context.Context, retention outbox.Retention, wake Wake) (Report, error) {
	rep := Report{Scenario: ScenarioSteady, Retention: string(retention), Wake: wake}
	err := r.withScratch(ctx, &rep, func(s scratch) error {
		if err := s.createOrders(ctx); err != nil {
			return err
		}
		if err := s.settle(ctx); err != nil {
			return err
		}
		half := r.cfg.Duration / 2
		r.progress("steady (%s, wake %s): %d writers without a relay for %v", retention, wake, r.cfg.Writers, half)
		alone, aloneTime, err := r.writeAlone(ctx, s, half)
		if err != nil {
			return fmt.Errorf("steady: %w", err)
		}
		if err := emptyAndSettle(ctx, s); err != nil {
			return fmt.Errorf("steady: %w", err)
		}
		if rep.Table.Before, err = s.tableSize(ctx); err != nil {
			return err
		}

		p := s.pools()
		defer p.close(ctx)
		wpool, err := p.writers(ctx, "outbox-bench-writer:"+s.name(), r.cfg.Writers)
		if err != nil {
			return err
		}
		rec := newRecorder(r.cfg.Sink, 0)
		relay, err := r.startRelay(ctx, p, s, retention, wake, outbox.OrderingNone, rec)
		if err != nil {
			return err
		}
		r.progress("steady (%s, wake %s): %d writers with the relay for %v", retention, wake, r.cfg.Writers, r.cfg.Duration)
		run := writerRun{pool: wpool, payload: r.payload, n: r.cfg.Writers, writer: r.newWriter(s, wake)}
		if wake == WakeProcess {
			run.afterCommit = relay.Wake
		}
		rss := startRSS()
		run.deadline = time.Now().Add(r.cfg.Duration)
		mid := r.sampleBacklogAt(ctx, s, r.cfg.Duration/2)
		commits, withTime, runErr := run.run(ctx)
		delivered, _, _ := rec.counts()
		backlogEnd, countErr := s.backlog(ctx)
		backlogMid, midErr := mid()
		stopErr := stopRelay(ctx, relay)
		rss.stopInto(&rep)
		if err := errors.Join(runErr, countErr, midErr, rec.err(), stopErr); err != nil {
			return fmt.Errorf("steady: %w", err)
		}
		if err := r.checkCommitted(ctx, s, commits, rec); err != nil {
			return fmt.Errorf("steady: %w", err)
		}
		p.close(ctx)
		if rep.Table.After, err = s.tableSize(ctx); err != nil {
			return err
		}

		if err := emptyAndSettle(ctx, s); err != nil {
			return fmt.Errorf("steady: %w", err)
		}
		r.progress("steady (%s, wake %s): %d writers without a relay for another %v", retention, wake, r.cfg.Writers, half)
		alone2, aloneTime2, err := r.writeAlone(ctx, s, r.cfg.Duration-half)
		if err != nil {
			return fmt.Errorf("steady: %w", err)
		}

		_, rep.Duplicates, _ = rec.counts()
		rep.Events, rep.Seconds = int64(len(commits)), withTime.Seconds()
		rep.EventsPerS = float64(delivered) / withTime.Seconds()
		st := &SteadyStats{
			WriterTPSWithoutRelay: float64(len(alone)+len(alone2)) / (aloneTime + aloneTime2).Seconds(),
			WriterTPSWithRelay:    float64(len(commits)) / withTime.Seconds(),
			BacklogMid:            backlogMid,
			BacklogEnd:            backlogEnd,
		}
		st.WriterTPSRatio = ratio(st.WriterTPSWithRelay, st.WriterTPSWithoutRelay)
		st.BacklogGrew = backlogEnd > max(backlogMid, int64(r.cfg.BatchSize*r.cfg.Workers))
		rep.SteadyStats = st
		return nil
	})
	return rep, err
}

// emptyAndSettle starts one of steady's phases afresh: empty tables, and
// nothing of the phase before left to write out.
func emptyAndSettle(ctx context.Context, s scratch) error {
	if err := s.truncate(ctx); err != nil {
		return err
	}
	return s.settle(ctx)
}

// writeAlone runs the writers without a relay for d, on connections of their
// own that are closed afterwards (so their statistics are flushed before the
// tables are emptied).
func (r *Runner) writeAlone(ctx context.Context, s scratch, d time.Duration) ([]commit, time.Duration, error) {
	p := s.pools()
	defer p.close(ctx)
	wpool, err := p.writers(ctx, "outbox-bench-writer-alone:"+s.name(), r.cfg.Writers)
	if err != nil {
		return nil, 0, err
	}
	run := writerRun{pool: wpool, payload: r.payload, n: r.cfg.Writers,
		writer: r.newWriter(s, WakePoll), deadline: time.Now().Add(d)}
	return run.run(ctx)
}

// startRelay starts an outbox.Relay on a relay pool of its own, woken as
// wake says, delivering in the given ordering.
func (r *Runner) startRelay(ctx context.Context, p pools, s scratch, retention outbox.Retention, wake Wake, ordering outbox.Ordering, sink outbox.Sink) (*benchRelay, error) {
	if wake == WakeLogical {
		return r.startCapture(ctx, p, s, retention, sink)
	}
	relayID := "bench:" + s.name()
	// One connection per batch in flight, one for the lease rescue, one
	// for LISTEN, one spare.
	db, err := p.relay(ctx, relayID, r.cfg.MaxInFlight+3)
	if err != nil {
		return nil, err
	}
	relay, err := outbox.NewRelay(db, outbox.RelayConfig{
		Sink: sink, Schema: s.schema(), RelayID: relayID, BatchSize: r.cfg.BatchSize, Workers: r.cfg.Workers,
		MaxInFlight: r.cfg.MaxInFlight, PollInterval: r.cfg.PollInterval, Retention: retention, Listen: wake == WakeListen, Logger: r.cfg.Logger,
		Ordering: ordering, Leases: r.cfg.Leases,
	})
	if err != nil {
		return nil, err
	}
	if err := relay.Start(ctx); err != nil {
		return nil, err
	}
	return &benchRelay{Relay: relay}, nil
}

// newWriter returns the writers' outbox.Writer for wake in the database's
// dialect: with WakeListen it notifies listening relays, debounced by
// outbox.NotifyIntervalDefault.
func (r *Runner) newWriter(s scratch, wake Wake) *outbox.Writer {
	cfg := outbox.WriterConfig{Schema: s.schema(), Dialect: r.info.dialect}
	if wake == WakeListen {
		cfg.NotifyInterval = outbox.NotifyIntervalDefault
	}
	return outbox.NewWriter(cfg)
}

// sampleBacklogAt counts the backlog after d in the background; the
// returned func waits for the count (or returns at once with the count so
// far, 0, if ctx ended first).
func (r *Runner) sampleBacklogAt(ctx context.Context, s scratch, d time.Duration) func() (int64, error) {
	var (
		wg  sync.WaitGroup
		n   int64
		err error
	)
	stop := make(chan struct{})
	wg.Go(func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-stop:
		case <-t.C:
			n, err = s.backlog(ctx)
		}
	})
	return func() (int64, error) {
		close(stop)
		wg.Wait()
		return n, err
	}
}

// checkCommitted checks, after the relay stopped, that every committed
// event was delivered or is still undelivered in the table: none was lost.
func (r *Runner) checkCommitted(ctx context.Context, s scratch, commits []commit, rec *recorder) error {
	var notAcked int64
	for _, c := range commits {
		if _, ok := rec.ackedAt(c.id); !ok {
			notAcked++
		}
	}
	remaining, err := s.backlog(ctx)
	if err != nil {
		return err
	}
	if remaining != notAcked {
		return fmt.Errorf("%d of %d committed events were not delivered, but %d are pending: events were lost",
			notAcked, len(commits), remaining)
	}
	return nil
}
