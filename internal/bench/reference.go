package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
)

// Reference drains a pre-filled backlog exactly as Drain does, but with the
// plain relay loop an engineer would write by hand with pgx: claim a batch
// in one statement, hand it to the sink, mark it in one statement. No
// fencing, no retries, no hooks: the yardstick for the relay's overhead.
// It runs Workers loops on a table made by the same migration, with the same
// batch size, poll interval, sink and pool settings as the relay.
func (r *Runner) Reference(ctx context.Context, retention outbox.Retention) (Report, error) {
	rep := Report{Scenario: ScenarioReference, Retention: string(retention)}
	err := r.withScratch(ctx, &rep, func(s scratch) error {
		r.progress("reference (%s): pre-filling %d events", retention, r.cfg.Events)
		if err := r.prefill(ctx, s); err != nil {
			return err
		}
		before, err := r.tableSize(ctx, s)
		if err != nil {
			return err
		}
		rep.Table.Before = before

		p := &pools{r: r}
		defer p.close(ctx)
		pool, err := p.relayPool(ctx, "bench-reference:"+s.name, r.cfg.Workers+1)
		if err != nil {
			return err
		}
		rec := newRecorder(r.cfg.Sink, r.cfg.Events)
		loop := newReferenceLoop(pool, s, retention, r.cfg, rec)
		r.progress("reference (%s): relaying %d events", retention, r.cfg.Events)
		rss := startRSS()
		start := time.Now()
		runErr := loop.run(ctx)
		elapsed := time.Since(start)
		rep.RSSPeakBytes = rss.Stop()
		if sinkErr := rec.err(); sinkErr != nil {
			runErr = sinkErr
		}
		if runErr != nil {
			return fmt.Errorf("reference (%s): %w", retention, runErr)
		}
		p.close(ctx)

		if err := r.verifyDrained(ctx, s, retention); err != nil {
			return fmt.Errorf("reference (%s): %w", retention, err)
		}
		if rep.Table.After, err = r.tableSize(ctx, s); err != nil {
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
	pool        *pgxpool.Pool
	claim, mark string
	batchSize   int
	workers     int
	poll        time.Duration
	sink        outbox.Sink
	target      int64
	marked      atomic.Int64
}

func newReferenceLoop(pool *pgxpool.Pool, s scratch, retention outbox.Retention, cfg Config, sink outbox.Sink) *referenceLoop {
	// The claim locks due rows in a materialized CTE, so it never locks more
	// than the limit and keeps the pending partial index's range scan.
	// ORDER BY (available_at, id) is that index's order: ordering by id
	// alone would walk the primary key through every processed row.
	claim := `WITH c AS MATERIALIZED (
    SELECT id FROM ` + s.table + `
    WHERE status = 'pending' AND available_at <= now()
    ORDER BY available_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE ` + s.table + ` AS e
SET status = 'processing', locked_until = now() + $2::bigint * interval '1 millisecond'
FROM c
WHERE e.id = c.id
RETURNING e.id, e.event_type, coalesce(e.aggregate_type, ''), coalesce(e.aggregate_id, ''), e.payload, e.headers`
	var mark string
	switch retention {
	case outbox.RetainDelete:
		mark = `DELETE FROM ` + s.table + ` WHERE id = ANY($1::bigint[])`
	case outbox.RetainArchive:
		mark = `WITH moved AS (
    DELETE FROM ` + s.table + ` WHERE id = ANY($1::bigint[])
    RETURNING id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
              attempts, max_attempts, last_error, available_at, created_at
)
INSERT INTO ` + s.archive + ` (id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
    status, attempts, max_attempts, last_error, available_at, created_at, updated_at, processed_at)
SELECT id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
    'processed', attempts, max_attempts, last_error, available_at, created_at, now(), now()
FROM moved`
	default:
		mark = `UPDATE ` + s.table + ` SET status = 'processed', processed_at = now() WHERE id = ANY($1::bigint[])`
	}
	return &referenceLoop{pool: pool, claim: claim, mark: mark, batchSize: cfg.BatchSize, workers: cfg.Workers,
		poll: cfg.PollInterval, sink: sink, target: int64(cfg.Events)}
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
	leaseMS := referenceLease.Milliseconds()
	for l.marked.Load() < l.target {
		events, err := l.claimBatch(ctx, leaseMS)
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
		tag, err := l.pool.Exec(ctx, l.mark, ids)
		if err != nil {
			return fmt.Errorf("mark: %w", err)
		}
		l.marked.Add(tag.RowsAffected())
	}
	return nil
}

func (l *referenceLoop) claimBatch(ctx context.Context, leaseMS int64) ([]outbox.Event, error) {
	rows, err := l.pool.Query(ctx, l.claim, l.batchSize, leaseMS)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	events := make([]outbox.Event, 0, l.batchSize)
	var headers []byte
	for rows.Next() {
		var e outbox.Event
		if err := rows.Scan(&e.ID, &e.EventType, &e.AggregateType, &e.AggregateID, &e.Payload, &headers); err != nil {
			return nil, err
		}
		if len(headers) > 2 { // not "{}"
			if err := json.Unmarshal(headers, &e.Headers); err != nil {
				return nil, fmt.Errorf("event %d headers: %w", e.ID, err)
			}
		}
		events = append(events, e)
	}
	return events, rows.Err()
}
