package brokertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sinktest"
)

// BenchKeyOrder publishes batches of 1000 events through sinks made by
// newSink (one per sub-benchmark), unordered and key-ordered
// (outbox.WithKeyOrder) in turns, with every event of its own aggregate
// (keys=1000) and with the batch spread over 10 aggregates, and reports
// events/s of each mode and their ratio.
func BenchKeyOrder(b *testing.B, newSink func(b *testing.B) outbox.Sink) {
	const batch = 1000
	for _, keys := range []int{batch, 10} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			s := newSink(b)
			ordered := outbox.WithKeyOrder(b.Context())
			var took [2]time.Duration // unordered, key-ordered
			round := 0
			for b.Loop() {
				// Both modes in every round, in turns, so that the load of
				// a shared machine weighs on both alike.
				for k := range 2 {
					mode := (round + k) % 2
					ctx := b.Context()
					if mode == 1 {
						ctx = ordered
					}
					events := batchOf(batch, keys)
					start := time.Now()
					if errs := s.Publish(ctx, events); errs != nil {
						b.Fatal(errs)
					}
					took[mode] += time.Since(start)
				}
				round++
			}
			unordered, keyOrdered := float64(b.N*batch)/took[0].Seconds(), float64(b.N*batch)/took[1].Seconds()
			b.ReportMetric(unordered, "unordered-events/s")
			b.ReportMetric(keyOrdered, "ordered-events/s")
			b.ReportMetric(keyOrdered/unordered, "ordered/unordered")
		})
	}
}

// batchOf returns n events spread over keys aggregates, taking turns, with
// fresh IDs.
func batchOf(n, keys int) []outbox.Event {
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = sinktest.NewEvent("order.created", `{"total":12.5,"items":[1,2,3]}`)
		events[i].AggregateID = fmt.Sprintf("order-%d", i%keys)
	}
	return events
}
