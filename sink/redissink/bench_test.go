package redissink_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/sink/redissink"
	"github.com/outboxkit/outbox/sinktest"
)

// BenchmarkPublishKeyOrder publishes batches of 1000 events, unordered and
// key-ordered (outbox.WithKeyOrder) in turns, with every event of its own
// aggregate (keys=1000) and with the batch spread over 10 aggregates, and
// reports events/s of each mode and their ratio:
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
