package redissink_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/sink/redissink"
)

// BenchmarkPublishKeyOrder publishes batches of 1000 events, unordered and
// key-ordered (outbox.WithKeyOrder) in turns, with every event of its own
// aggregate (keys=1000) and with the batch spread over 10 aggregates, and
// reports events/s of each mode and their ratio:
//
//	go test ./sink/redissink -run '^$' -bench PublishKeyOrder -benchtime 50x
func BenchmarkPublishKeyOrder(b *testing.B) {
	opts, err := redis.ParseURL(server.URL())
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	b.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(b.Context()).Err(); err != nil {
		server.Unreachable(b, err)
	}
	// A stream per round: a stream that grows would make later rounds
	// slower than earlier ones.
	newSink := func(b *testing.B) *redissink.Sink {
		stream := brokertest.UniqueName(b, "outbox-bench.", ".")
		b.Cleanup(func() { rdb.Del(context.Background(), stream) })
		s, err := redissink.New(b.Context(), redissink.Config{URL: server.URL(), Router: fixed(b, stream), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}

	brokertest.BenchKeyOrder(b, func(b *testing.B) outbox.Sink { return newSink(b) })
}
