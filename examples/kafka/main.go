// Command kafka shows the outbox end to end with Kafka: it migrates a
// schema of its own, writes three events in one transaction, relays them
// with kafkasink and reads them back with a consumer, printing what
// arrived. Without -kafka it starts an in-process kfake cluster, so it runs
// with nothing but PostgreSQL. It removes the schema when done.
//
//	go run ./examples/kafka -db postgres://postgres@127.0.0.1:5432/test
//	go run ./examples/kafka -kafka kafka://127.0.0.1:9092
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
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/kafkasink"
)

func main() {
	dbURL := flag.String("db", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL (or $DATABASE_URL)")
	kafkaURL := flag.String("kafka", os.Getenv("KAFKA_URL"), "Kafka sink URL (or $KAFKA_URL), such as kafka://127.0.0.1:9092; empty starts an in-process kfake cluster")
	flag.Parse()
	if err := run(*dbURL, *kafkaURL); err != nil {
		fmt.Fprintln(os.Stderr, "examples/kafka:", err)
		os.Exit(1)
	}
}

func run(dbURL, kafkaURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	db := outbox.Postgres(pool)
	id := rand.Uint32()
	schema := fmt.Sprintf("outbox_example_kafka_%d", id)
	if _, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{Schema: schema}); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer dropSchema(pool, schema)
	fmt.Println("migrated schema", schema)

	topic := fmt.Sprintf("outbox-example-orders-%d", id)
	if kafkaURL == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
		if err != nil {
			return err
		}
		defer cluster.Close()
		kafkaURL = "kafka://" + cluster.ListenAddrs()[0]
		fmt.Println("started an in-process kfake cluster")
	}
	cfg, err := kafkasink.ConfigFromURL(kafkaURL)
	if err != nil {
		return err
	}
	if cfg.Router, err = route.New(topic); err != nil {
		return err
	}
	cfg.AutoCreateTopics = true // on a real cluster that allows it
	cfg.Logger = slog.New(slog.DiscardHandler)
	sink, err := kafkasink.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = sink.Close() }()

	// The business transaction writes its events into the outbox.
	writer := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx,
			outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: "o-1", CorrelationID: "checkout-7", Payload: map[string]any{"total_cents": 1250}},
			outbox.Message{EventType: "order.paid", AggregateType: "order", AggregateID: "o-1", CorrelationID: "checkout-7", Payload: map[string]any{"method": "card"}},
			outbox.Message{EventType: "order.shipped", AggregateType: "order", AggregateID: "o-1", CorrelationID: "checkout-7", Payload: map[string]any{"carrier": "post"}},
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

	// A consumer, as another service would run it.
	opts := []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
	if cfg.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(cfg.TLS))
	}
	consumer, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer consumer.Close()
	for received := 0; received < 3; {
		fetches := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("received %d of 3 events: %w", received, err)
		}
		for _, r := range fetches.Records() {
			fmt.Printf("received %s[%d] key=%s: ce_id=%s ce_type=%s ce_correlationid=%s value=%s\n",
				r.Topic, r.Partition, r.Key, header(r, "ce_id"), header(r, "ce_type"), header(r, "ce_correlationid"), r.Value)
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

func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
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
