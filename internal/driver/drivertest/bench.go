package drivertest

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
)

// DrainEvents is how many events BenchDrain prefills per iteration.
const DrainEvents = 10000

// drainEvents is DrainEvents, or a fifth of it for scripts/test's
// one-iteration smoke run (OUTBOX_BENCH_SMOKE=1), which runs under the race
// detector: SQLite (modernc.org/sqlite, Go code) is then some hundred
// times slower, and an ordered drain over 10 keys took four minutes.
func drainEvents() int {
	if os.Getenv("OUTBOX_BENCH_SMOKE") == "1" {
		return DrainEvents / 5
	}
	return DrainEvents
}

// countSink discards events and closes done when it has seen want.
type countSink struct {
	n, want atomic.Int64
	done    chan struct{}
}

func (s *countSink) Publish(_ context.Context, events []outbox.Event) []error {
	if s.n.Add(int64(len(events))) >= s.want.Load() {
		select {
		case <-s.done:
		default:
			close(s.done)
		}
	}
	return nil
}

// BenchDrain measures how fast one relay (batches of 100, 2 workers,
// retention processed) drains DrainEvents (drainEvents) prefilled events to a sink that
// discards them, and reports events/s. Only the drain is timed.
func BenchDrain(b *testing.B, h Harness) { benchDrain(b, h, 0) }

// BenchDrainOrdered is BenchDrain with the relay in ordered mode
// (RelayConfig.Ordering aggregate) and the events spread over keys
// aggregates, round robin.
func BenchDrainOrdered(b *testing.B, h Harness, keys int) { benchDrain(b, h, keys) }

// benchDrain is BenchDrain, ordered over keys aggregates unless keys is 0.
func benchDrain(b *testing.B, h Harness, keys int) {
	ctx := context.Background()
	var total time.Duration
	for range b.N {
		b.StopTimer()
		db := h.Open(b, false)
		w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema, Dialect: db.Dialect})
		msgs := make([]outbox.Message, 500)
		for i := range msgs {
			msgs[i] = outbox.Message{EventType: "bench.drained", AggregateType: "bench", AggregateID: "a",
				Payload: json.RawMessage(`{"order_id":12345,"total_cents":4999,"currency":"EUR"}`)}
		}
		for j := range drainEvents() / len(msgs) {
			if keys > 0 {
				for i := range msgs {
					msgs[i].AggregateID = strconv.Itoa((j*len(msgs) + i) % keys)
				}
			}
			tx, err := db.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Write(ctx, w, msgs...); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		}
		sink := &countSink{done: make(chan struct{})}
		sink.want.Store(int64(drainEvents()))
		cfg := outbox.RelayConfig{
			Sink: sink, Schema: db.Schema, RelayID: "bench", BatchSize: 100, Workers: 2,
			PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		}
		if keys > 0 {
			cfg.Ordering = outbox.OrderingAggregate
		}
		relay, err := outbox.NewRelay(db.Database, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := relay.Start(ctx); err != nil {
			b.Fatal(err)
		}
		select {
		case <-sink.done:
		case <-time.After(5 * time.Minute):
			b.Fatal("drain stalled")
		}
		total += time.Since(start)
		b.StopTimer()
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = relay.Stop(stopCtx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(drainEvents()*b.N)/total.Seconds(), "events/s")
}
