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

// BenchmarkPublishKeyOrder publishes batches of 1000 events to a JetStream
// file stream, unordered and key-ordered (outbox.WithKeyOrder), with every
// event of its own aggregate and with the batch spread over 10
// aggregates, and reports events/s:
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
	id := brokertest.RandomName()
	stream, prefix := "OUTBOX_BENCH_"+strings.ToUpper(id), "b"+id
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: stream, Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage, Duplicates: time.Minute, MaxMsgs: 100_000,
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	router := mustRouter(b, prefix+".{event_type}")
	s, err := natssink.New(ctx, natssink.Config{Servers: []string{natsAddr()}, Router: router, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })

	for _, keys := range []int{batch, 10} {
		for _, ordered := range []bool{false, true} {
			b.Run(fmt.Sprintf("keys=%d/ordered=%v", keys, ordered), func(b *testing.B) {
				ctx := b.Context()
				if ordered {
					ctx = outbox.WithKeyOrder(ctx)
				}
				for b.Loop() {
					b.StopTimer()
					// New IDs each round: JetStream drops a message ID it
					// saw within the duplicate window.
					events := make([]outbox.Event, batch)
					for i := range events {
						events[i] = sinktest.NewEvent("order.created", `{"total":12.5,"items":[1,2,3]}`)
						events[i].AggregateID = fmt.Sprintf("order-%d", i%keys)
					}
					b.StartTimer()
					if errs := s.Publish(ctx, events); errs != nil {
						b.Fatal(errs)
					}
				}
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}
