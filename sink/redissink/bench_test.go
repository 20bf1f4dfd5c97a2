package redissink_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/sink/redissink"
	"github.com/outboxkit/outbox/sinktest"
)

// BenchmarkPublishKeyOrder publishes batches of 1000 events to one stream,
// unordered and key-ordered (outbox.WithKeyOrder), with every event of its
// own aggregate and with the batch spread over 10 aggregates, and reports
// events/s:
//
//	go test ./sink/redissink -run '^$' -bench PublishKeyOrder -benchtime 50x
func BenchmarkPublishKeyOrder(b *testing.B) {
	const batch = 1000
	opts, err := redis.ParseURL(server.URL())
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	b.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(b.Context()).Err(); err != nil {
		server.Unreachable(b, err)
	}
	stream := brokertest.UniqueName(b, "outbox-bench.", ".")
	b.Cleanup(func() { rdb.Del(context.Background(), stream) })
	r := fixed(b, stream)
	s, err := redissink.New(b.Context(), redissink.Config{URL: server.URL(), Router: r, MaxLen: 100_000, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })

	for _, keys := range []int{batch, 10} {
		events := make([]outbox.Event, batch)
		for i := range events {
			events[i] = sinktest.NewEvent("order.created", `{"total":12.5,"items":[1,2,3]}`)
			events[i].AggregateID = fmt.Sprintf("order-%d", i%keys)
		}
		for _, ordered := range []bool{false, true} {
			name := fmt.Sprintf("keys=%d/ordered=%v", keys, ordered)
			b.Run(name, func(b *testing.B) {
				ctx := b.Context()
				if ordered {
					ctx = outbox.WithKeyOrder(ctx)
				}
				for b.Loop() {
					if errs := s.Publish(ctx, events); errs != nil {
						b.Fatal(errs)
					}
				}
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}
