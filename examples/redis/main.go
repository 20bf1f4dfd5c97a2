// Command redis shows the outbox end to end with Redis Streams: it migrates
// a schema of its own, writes three events in one transaction, relays them
// with redissink into a stream, and reads them back with XREAD, printing
// what arrived. It removes the schema and the stream when done.
//
//	go run ./examples/redis -db postgres://postgres@127.0.0.1:5432/test -redis redis://127.0.0.1:6379/0
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/redissink"
)

func main() {
	dbURL := flag.String("db", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL (or $DATABASE_URL)")
	redisURL := flag.String("redis", envOr("REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis sink URL (or $REDIS_URL); see package redissink for its options")
	flag.Parse()
	if err := run(*dbURL, *redisURL); err != nil {
		fmt.Fprintln(os.Stderr, "examples/redis:", err)
		os.Exit(1)
	}
}

func run(dbURL, redisURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	db := outbox.Postgres(pool)
	id := rand.Uint32()
	schema := fmt.Sprintf("outbox_example_redis_%d", id)
	if _, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{Schema: schema}); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer dropSchema(pool, schema)
	fmt.Println("migrated schema", schema)

	// One stream per aggregate type, trimmed to about 10000 entries.
	cfg, err := redissink.ConfigFromURL(redisURL)
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("outbox.example.%d", id)
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

	// The business transaction writes its events into the outbox.
	writer := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx,
			outbox.Message{EventType: "created", AggregateType: "order", AggregateID: "o-1", CorrelationID: "checkout-7", Payload: map[string]any{"total_cents": 1250}},
			outbox.Message{EventType: "paid", AggregateType: "order", AggregateID: "o-1", CorrelationID: "checkout-7", Payload: map[string]any{"method": "card"}},
			outbox.Message{EventType: "shipped", AggregateType: "order", AggregateID: "o-1", CorrelationID: "checkout-7", Payload: map[string]any{"carrier": "post"}},
		)
		return err
	})
	if err != nil {
		return err
	}
	fmt.Println("wrote 3 events in one transaction")

	relay, err := outbox.NewRelay(db, outbox.RelayConfig{Sink: sink, Schema: schema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if err := relay.Start(ctx); err != nil {
		return err
	}
	relay.Wake()

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

	if err := relay.Stop(ctx); err != nil {
		return err
	}
	stats, err := outbox.NewManager(db, outbox.ManagerConfig{Schema: schema}).Stats(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("outbox: %d processed, %d pending\n", stats.Processed, stats.Pending)
	return nil
}

func dropSchema(pool *pgxpool.Pool, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
