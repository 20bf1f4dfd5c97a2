package natssink_test

import (
	"context"
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

	brokertest.BenchKeyOrder(b, func(b *testing.B) outbox.Sink { return newSink(b) })
}
