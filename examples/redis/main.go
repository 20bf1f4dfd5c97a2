// Command redis shows the outbox end to end with Redis Streams: it migrates
// a schema of its own, writes three events in one transaction, relays them
// with redissink into a stream, and reads them back with XREAD, printing
// what arrived. It removes the schema and the stream when done.
//
//	go run ./examples/redis -db postgres://postgres@127.0.0.1:5432/test -redis redis://127.0.0.1:6379/0
package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox/examples/internal/demo"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/redissink"
)

func main() {
	demo.Main("redis", demo.Flag{
		Name: "redis", Env: "REDIS_URL", Default: "redis://127.0.0.1:6379/0",
		Usage: "Redis sink URL (or $REDIS_URL); see package redissink for its options",
	}, run)
}

func run(ctx context.Context, d *demo.Demo, redisURL string) error {
	// One stream per aggregate type, trimmed to about 10000 entries.
	cfg, err := redissink.ConfigFromURL(redisURL)
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("outbox.example.%d", d.ID)
	if cfg.Router, err = route.New(prefix + ".{aggregate_type}"); err != nil {
		return err
	}
	cfg.MaxLen = 10000
	cfg.Logger = slog.New(slog.DiscardHandler)
	sink, err := redissink.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = sink.Close() }()
	stream := prefix + ".order"

	// A consumer, as another service would run it.
	opts, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer func() { _ = rdb.Close() }()
	defer rdb.Del(context.WithoutCancel(ctx), stream)

	return d.Relay(ctx, sink, demo.Checkout(""), func(ctx context.Context) error {
		last := "0"
		for received := 0; received < 3; {
			res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{stream, last}, Block: 5 * time.Second}).Result()
			if err != nil {
				return fmt.Errorf("XREAD after %d of 3 events: %w", received, err)
			}
			for _, m := range res[0].Messages {
				v := m.Values
				fmt.Printf("received %s %s: id=%v type=%v subject=%v correlationid=%v data=%v\n",
					stream, m.ID, v["id"], v["type"], v["subject"], v["correlationid"], v["data"])
				last = m.ID
				received++
			}
		}
		return nil
	})
}
