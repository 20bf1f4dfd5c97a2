package natssink_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/sink/natssink"
	"github.com/outboxkit/outbox/sinktest"
)

// BenchmarkPublishKeyOrder publishes batches of 1000 events, unordered and
// key-ordered (outbox.WithKeyOrder) in turns, with every event of its own
// aggregate (keys=1000) and with the batch spread over 10 aggregates, and
// reports events/s of each mode and their ratio:
//
//	go test ./sink/natssink -run '^$' -bench PublishKeyOrder -benchtime 20x
func BenchmarkPublishKeyOrder(b *testing.B) {
	const batch = 1000
	nc, err := nats.Connect("nats://" + natsAddr())
	if err != nil {
		b.Fatalf("NATS with JetStream is not reachable at %s: %v", natsAddr(), err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	// A stream and a sink per round: a stream that fills up, and
	// JetStream's duplicate window that grows with every message ID,
	// would make later rounds slower than earlier ones.
	newSink := func(b *testing.B) *natssink.Sink {
		id := brokertest.RandomName()
		stream, prefix := "OUTBOX_BENCH_"+strings.ToUpper(id), "b"+id
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name: stream, Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage, Duplicates: time.Minute,
		}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
		s, err := natssink.New(ctx, natssink.Config{Servers: []string{natsAddr()}, Router: mustRouter(b, prefix+".{event_type}"), Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}

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
