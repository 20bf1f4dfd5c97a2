package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox"
)

// Reference drains a pre-filled backlog exactly as Drain does, but with the
// plain relay loop an engineer would write by hand: claim a batch, hand it
// to the sink, mark it in one statement. On PostgreSQL (pgx) the claim is
// one statement with SKIP LOCKED; on MySQL/MariaDB (database/sql) a short
// READ COMMITTED transaction selects with SKIP LOCKED and updates; on SQLite
// a BEGIN IMMEDIATE transaction selects and updates. No fencing, no retries,
// no hooks: the yardstick for the relay's overhead. It runs Workers loops on
// a table made by the same migration, with the same batch size, poll
// interval, sink and pool settings as the relay.
func (r *Runner) Reference(ctx context.Context, retention outbox.Retention) (Report, error) {
	return r.reference(ctx, retention, r.cfg.Sink, "reference")
}

// reference is Reference publishing to sink; label names the loop in
// progress lines and errors.
func (r *Runner) reference(ctx context.Context, retention outbox.Retention, sink outbox.Sink, label string) (Report, error) {
	rep := Report{Scenario: ScenarioReference, Retention: string(retention)}
	err := r.withScratch(ctx, &rep, func(s scratch) error {
		r.progress("%s (%s): pre-filling %d events", label, retention, r.cfg.Events)
		if err := s.prefill(ctx, r.cfg.Events, r.payload, 0); err != nil {
			return err
		}
		before, err := s.tableSize(ctx)
		if err != nil {
			return err
		}
		rep.Table.Before = before

		p := s.pools()
		defer p.close(ctx)
		db, err := p.reference(ctx, "bench-reference:"+s.name(), r.cfg.Workers+1, retention)
		if err != nil {
			return err
		}
		rec := newRecorder(sink, r.cfg.Events)
		loop := newReferenceLoop(db, r.cfg, rec)
		r.progress("%s (%s): relaying %d events", label, retention, r.cfg.Events)
		rss := startRSS()
		start := time.Now()
		runErr := loop.run(ctx)
		elapsed := time.Since(start)
		rss.stopInto(&rep)
		if sinkErr := rec.err(); sinkErr != nil {
			runErr = sinkErr
		}
		if runErr != nil {
			return fmt.Errorf("%s (%s): %w", label, retention, runErr)
		}
		p.close(ctx)

		if err := r.verifyDrained(ctx, s, retention); err != nil {
			return fmt.Errorf("%s (%s): %w", label, retention, err)
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

// referenceLease is the reference loop's lease; it never expires during a
// drain, and nothing rescues expired leases.
const referenceLease = 30 * time.Second

// referenceLoop is the hand-written relay.
type referenceLoop struct {
	db        referenceDB
	batchSize int
	workers   int
	poll      time.Duration
	sink      outbox.Sink
	target    int64
	marked    atomic.Int64
}

func newReferenceLoop(db referenceDB, cfg Config, sink outbox.Sink) *referenceLoop {
	return &referenceLoop{db: db, batchSize: cfg.BatchSize, workers: cfg.Workers, poll: cfg.PollInterval,
		sink: sink, target: int64(cfg.Events)}
}

// run runs the loops until target events are marked; the first error
// (or a stall) stops them all.
func (l *referenceLoop) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	for range l.workers {
		wg.Go(func() {
			if err := l.loop(ctx); err != nil {
				fail(err)
			}
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	if err := waitMarked(ctx, done, nil, l.marked.Load); err != nil {
		fail(err)
	}
	<-done
	mu.Lock()
	defer mu.Unlock()
	return firstErr
}

// loop is one claim-publish-mark loop.
func (l *referenceLoop) loop(ctx context.Context) error {
	for l.marked.Load() < l.target {
		events, err := l.db.claim(ctx, l.batchSize)
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		if len(events) == 0 {
			t := time.NewTimer(l.poll)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
			continue
		}
		for _, err := range l.sink.Publish(ctx, events) {
			if err != nil {
				return errSinkFailed
			}
		}
		ids := make([]int64, len(events))
		for i := range events {
			ids[i] = events[i].ID
		}
		n, err := l.db.mark(ctx, ids)
		if err != nil {
			return fmt.Errorf("mark: %w", err)
		}
		l.marked.Add(n)
	}
	return nil
}
