package natssink_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/sink/natssink"
)

// BenchmarkPublishKeyOrder publishes batches of 1000 events, unordered and
// key-ordered (outbox.WithKeyOrder) in turns, with every event of its own
// aggregate (keys=1000) and with the batch spread over 10 aggregates, and
// reports events/s of each mode and their ratio:
//
//	go test ./sink/natssink -run '^$' -bench PublishKeyOrder -benchtime 20x
func BenchmarkPublishKeyOrder(b *testing.B) {
	js := benchJetStream(b)
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

	brokertest.BenchKeyOrder(b, func(b *testing.B) outbox.Sink { return newSink(b) })
}

// BenchmarkPublish publishes batches of 1000 events (outbox bench's
// 325-byte payloads) to a file stream with a short duplicate window, and
// reports allocations per batch; with -cpuprofile it shows where the
// client's CPU per message goes:
//
//	go test ./sink/natssink -run '^$' -bench 'Publish$' -benchtime 50x -benchmem
func BenchmarkPublish(b *testing.B) {
	js := benchJetStream(b)
	id := brokertest.RandomName()
	stream, prefix := "OUTBOX_BENCH_"+strings.ToUpper(id), "b"+id
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: stream, Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage, Duplicates: time.Second,
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	s, err := natssink.New(ctx, natssink.Config{Servers: []string{natsAddr()}, Stream: stream, Router: mustRouter(b, prefix+".{event_type}"), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	payload := []byte(`{"order_id":"00000000-0000-0000-0000-000000000000","customer":"bench","items":[` +
		`{"sku":"A-1","qty":1,"price":"10.00"},{"sku":"B-2","qty":2,"price":"20.00"},{"sku":"C-3","qty":3,"price":"30.00"}],` +
		`"note":"padding padding padding padding padding padding padding padding padding padding padding padding padding"}`)
	now := time.Now()
	events := make([]outbox.Event, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	for n := range b.N {
		for i := range events {
			id := int64(n*len(events) + i + 1) // new IDs: no duplicates
			events[i] = outbox.Event{ID: id, EventType: "order.created", AggregateType: "order", AggregateID: strconv.FormatInt(id, 10),
				Payload: payload, Status: outbox.StatusProcessing, AvailableAt: now, CreatedAt: now, UpdatedAt: now}
		}
		for _, err := range s.Publish(ctx, events) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*len(events))/b.Elapsed().Seconds(), "events/s")
}

// benchJetStream connects to the test NATS server's JetStream for a
// benchmark, closing the connection when it ends.
func benchJetStream(b *testing.B) jetstream.JetStream {
	nc, err := nats.Connect("nats://" + natsAddr())
	if err != nil {
		b.Fatalf("NATS with JetStream is not reachable at %s: %v", natsAddr(), err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	return js
}
