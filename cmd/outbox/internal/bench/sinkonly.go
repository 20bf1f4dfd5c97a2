package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox"
)

// Sink publishes Events events straight through the sink with no database:
// the sink's own limit in this run. The events are the ones drain pre-fills
// (same payload, event type, aggregate), built in memory before the clock
// starts and published in batches of BatchSize by MaxInFlight loops, each
// calling Publish with one batch after the other: as many batches at once
// as the relay holds in flight.
// With the Discard sink it measures the bench harness itself (the
// recorder's bookkeeping). A rejected event ends the scenario with an
// error, as in drain.
func (r *Runner) Sink(ctx context.Context) (Report, error) {
	return r.sinkOnly(ctx, r.cfg.Sink)
}

func (r *Runner) sinkOnly(ctx context.Context, sink outbox.Sink) (Report, error) {
	rep := Report{Scenario: ScenarioSink}
	r.progress("sink: building %d events", r.cfg.Events)
	events := benchEvents(r.cfg.Events, r.payload)
	rec := newRecorder(sink, r.cfg.Events)
	r.progress("sink: publishing %d events to %s", r.cfg.Events, r.cfg.SinkName)
	rss := startRSS()
	start := time.Now()
	err := publishBatches(ctx, rec, events, r.cfg.BatchSize, r.cfg.MaxInFlight)
	elapsed := time.Since(start)
	rss.stopInto(&rep)
	if sinkErr := rec.err(); sinkErr != nil {
		err = sinkErr
	}
	if err != nil {
		return rep, fmt.Errorf("sink: %w", err)
	}
	delivered, dups, _ := rec.counts()
	if delivered != int64(len(events)) {
		return rep, fmt.Errorf("sink: %d of %d events acknowledged", delivered, len(events))
	}
	rep.Events, rep.Duplicates, rep.Seconds = delivered, dups, elapsed.Seconds()
	rep.EventsPerS = float64(delivered) / elapsed.Seconds()
	return rep, nil
}

// benchEvents returns n events shaped as the relay hands drain's pre-filled
// events to the sink: IDs 1 to n, aggregate ID the ID, one shared payload.
func benchEvents(n int, payload []byte) []outbox.Event {
	now := time.Now()
	events := make([]outbox.Event, n)
	for i := range events {
		id := int64(i + 1)
		events[i] = outbox.Event{ID: id, EventType: "order.created", AggregateType: "order",
			AggregateID: strconv.FormatInt(id, 10), Payload: payload, Status: outbox.StatusProcessing,
			AvailableAt: now, CreatedAt: now, UpdatedAt: now}
	}
	return events
}

// publishBatches has workers loops take the next batch of batchSize events
// and publish it, until every event was published once. The first failed
// publish (or ctx) stops them all.
func publishBatches(ctx context.Context, sink outbox.Sink, events []outbox.Event, batchSize, workers int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	batches := int64((len(events) + batchSize - 1) / batchSize)
	for range workers {
		wg.Go(func() {
			for {
				b := next.Add(1) - 1
				if b >= batches || ctx.Err() != nil {
					return
				}
				lo := int(b) * batchSize
				batch := events[lo:min(lo+batchSize, len(events))]
				for _, err := range sink.Publish(ctx, batch) {
					if err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = errSinkFailed
						}
						mu.Unlock()
						cancel()
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return context.Cause(ctx)
}
