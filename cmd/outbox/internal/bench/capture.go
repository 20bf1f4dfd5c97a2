package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxcdc"
)

// WakeLogical runs steady and latency with the capture relay (`outbox relay
// --capture logical`, package outboxcdc): the relay streams committed
// inserts from a logical replication slot instead of claiming them, beside
// its table path. PostgreSQL with wal_level = logical only; Config.Capture
// adds it.
const WakeLogical Wake = "logical"

// The values of Config.Capture.
const (
	CapturePoll    = "poll"
	CaptureLogical = "logical"
	CaptureAll     = "all"
)

// benchRelay is a running relay: the table relay alone, or the capture
// relay's stream and its table path.
type benchRelay struct {
	*outbox.Relay
	// stopStream, for a capture relay, stops the stream and drops the
	// slot.
	stopStream func(ctx context.Context) error
}

// captureWakes are the wake-up modes steady and latency run in for
// capture.
func captureWakes(capture string, wakes []Wake) []Wake {
	switch capture {
	case CaptureLogical:
		return []Wake{WakeLogical}
	case CaptureAll:
		return append(wakes[:len(wakes):len(wakes)], WakeLogical)
	}
	return wakes
}

// capturePolls reports whether the table relay's runs are asked for.
func capturePolls(capture string) bool { return capture != CaptureLogical }

// captureStreams reports whether the capture relay's runs are asked for.
func captureStreams(capture string) bool { return capture == CaptureLogical || capture == CaptureAll }

// startCapture creates the slot and the publication of s's table and
// starts the capture relay and its table path on pools of their own.
func (r *Runner) startCapture(ctx context.Context, p pools, s scratch, retention outbox.Retention, sink outbox.Sink) (*benchRelay, error) {
	pp, ok := p.(*pgPools)
	if !ok {
		return nil, errors.New("the capture relay needs PostgreSQL")
	}
	relayID := "bench:" + s.name()
	// The table path's claim loops and rescue, the stream's marks, lease
	// row and lag reads.
	pool, err := pp.relayPool(ctx, relayID, r.cfg.Workers+5)
	if err != nil {
		return nil, err
	}
	stream, err := outboxcdc.New(pool, &pool.Config().ConnConfig.Config, outboxcdc.Config{
		Sink: sink, Schema: s.schema(), RelayID: relayID, Retention: retention, BatchSize: r.cfg.BatchSize,
		Logger: r.cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	slot, err := stream.Prepare(ctx)
	if err != nil {
		return nil, err
	}
	drop := func(ctx context.Context) error {
		_, _, err := outboxcdc.Drop(ctx, pool, s.schema(), "")
		return err
	}
	relay, err := outbox.NewRelay(outbox.Postgres(pool), outbox.RelayConfig{
		Sink: sink, Schema: s.schema(), RelayID: relayID, BatchSize: r.cfg.BatchSize, Workers: r.cfg.Workers,
		// The table path carries retries and the backlog only: it polls
		// at the relay's default, as `outbox relay --capture logical`.
		PollInterval: max(r.cfg.PollInterval, outbox.PollIntervalDefault), Retention: retention, Logger: r.cfg.Logger, CaptureSlot: slot.Name,
	})
	if err != nil {
		return nil, errors.Join(err, drop(ctx))
	}
	if err := relay.Start(ctx); err != nil {
		return nil, errors.Join(err, drop(ctx))
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- stream.Run(runCtx) }()
	// Measure from the moment the relay streams.
	if err := poll(ctx, time.Millisecond, func() (bool, error) {
		select {
		case err := <-done:
			done <- err
			return false, fmt.Errorf("capture relay: %w", cmp.Or(err, errors.New("stopped")))
		default:
		}
		return stream.Streaming(), nil
	}); err != nil {
		cancel()
		return nil, errors.Join(err, relay.Stop(ctx), drop(ctx))
	}
	return &benchRelay{Relay: relay, stopStream: func(ctx context.Context) error {
		cancel()
		err := <-done
		return errors.Join(err, drop(ctx))
	}}, nil
}

// captureDrain is the capture relay's burst: it creates the slot, then
// writes Events events in one statement (the burst) and measures the time
// from the relay's start until the sink acknowledged every one of them.
// The marks follow asynchronously; the scenario waits for them before it
// checks the table.
func (r *Runner) captureDrain(ctx context.Context, retention outbox.Retention) (Report, error) {
	rep := Report{Scenario: ScenarioDrain, Retention: string(retention), Wake: WakeLogical}
	err := r.withScratch(ctx, &rep, func(s scratch) error {
		p := s.pools()
		defer p.close(ctx)
		pp, ok := p.(*pgPools)
		if !ok {
			return errors.New("the capture relay needs PostgreSQL")
		}
		pool, err := pp.relayPool(ctx, "bench-setup:"+s.name(), 2)
		if err != nil {
			return err
		}
		// The slot first: the burst must be in its stream.
		if _, err := outboxcdc.Setup(ctx, pool, &pool.Config().ConnConfig.Config, s.schema(), ""); err != nil {
			return err
		}
		r.progress("drain (%s, capture logical): writing a burst of %d events", retention, r.cfg.Events)
		if err := burst(ctx, pool, s, r.cfg.Events, r.cfg.BatchSize, r.payload); err != nil {
			return errors.Join(err, dropSlot(ctx, pool, s))
		}
		if err := s.settle(ctx); err != nil {
			return errors.Join(err, dropSlot(ctx, pool, s))
		}
		if rep.Table.Before, err = s.tableSize(ctx); err != nil {
			return errors.Join(err, dropSlot(ctx, pool, s))
		}
		rec := newRecorder(r.cfg.Sink, r.cfg.Events)
		r.progress("drain (%s, capture logical): streaming %d events to %s", retention, r.cfg.Events, r.cfg.SinkName)
		rss := startRSS()
		start := time.Now()
		relay, err := r.startCapture(ctx, p, s, retention, rec)
		if err != nil {
			rss.Stop()
			return errors.Join(err, dropSlot(ctx, pool, s))
		}
		waitErr := poll(ctx, time.Millisecond, func() (bool, error) {
			delivered, _, _ := rec.counts()
			return delivered >= int64(r.cfg.Events), rec.err()
		})
		elapsed := time.Since(start)
		// The marks lag the acknowledgements a little.
		markErr := poll(ctx, 10*time.Millisecond, func() (bool, error) {
			n, err := s.backlog(ctx)
			return n == 0, err
		})
		stopErr := stopRelay(ctx, relay)
		rss.stopInto(&rep)
		if err := errors.Join(waitErr, markErr, stopErr); err != nil {
			return fmt.Errorf("drain (%s, capture logical): %w", retention, err)
		}
		p.close(ctx)
		if err := r.verifyDrained(ctx, s, retention); err != nil {
			return fmt.Errorf("drain (%s, capture logical): %w", retention, err)
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

// burst writes n events in transactions of size events each, as a burst
// of application writes would: the slot streams them in commit order.
func burst(ctx context.Context, pool *pgxpool.Pool, s scratch, n, size int, payload []byte) error {
	table := s.(*pgScratch).table
	for done := 0; done < n; done += size {
		k := min(size, n-done)
		if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (event_type, aggregate_type, aggregate_id, payload)
SELECT 'order.created', 'order', g::text, $2::jsonb FROM generate_series(1, $1::int) AS g`, k, string(payload)); err != nil {
			return fmt.Errorf("burst: %w", err)
		}
	}
	return nil
}

// dropSlot drops s's capture slot after a failed setup.
func dropSlot(ctx context.Context, pool *pgxpool.Pool, s scratch) error {
	_, _, err := outboxcdc.Drop(context.WithoutCancel(ctx), pool, s.schema(), "")
	return err
}
