// Command rabbitmq shows the outbox end to end with RabbitMQ: it migrates a
// schema of its own, writes three events in one transaction, relays them
// with amqpsink to a topic exchange it declares, and reads them back from a
// queue bound to that exchange, printing what arrived. It removes the
// schema, the exchange and the queue when done.
//
//	go run ./examples/rabbitmq -db postgres://postgres@127.0.0.1:5432/test -amqp amqp://guest:guest@127.0.0.1:5672/
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
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/sink/amqpsink"
)

func main() {
	dbURL := flag.String("db", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL (or $DATABASE_URL)")
	amqpURL := flag.String("amqp", envOr("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "AMQP sink URL (or $AMQP_URL); see package amqpsink for its options")
	flag.Parse()
	if err := run(*dbURL, *amqpURL); err != nil {
		fmt.Fprintln(os.Stderr, "examples/rabbitmq:", err)
		os.Exit(1)
	}
}

func run(dbURL, amqpURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	db := outbox.Postgres(pool)
	id := rand.Uint32()
	schema := fmt.Sprintf("outbox_example_rabbitmq_%d", id)
	if _, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{Schema: schema}); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer dropSchema(pool, schema)
	fmt.Println("migrated schema", schema)

	// The sink declares a topic exchange of its own; events go out with
	// the routing key {aggregate_type}.{event_type}.
	cfg, err := amqpsink.ConfigFromURL(amqpURL)
	if err != nil {
		return err
	}
	cfg.Exchange = fmt.Sprintf("outbox.example.%d", id)
	cfg.DeclareExchange = true
	cfg.Logger = slog.New(slog.DiscardHandler)
	sink, err := amqpsink.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = sink.Close() }()
	fmt.Println("declared exchange", cfg.Exchange)

	// A consumer, as another service would run it: its own queue, bound to
	// every order event.
	conn, err := amqp.Dial(cfg.URL)
	if err != nil {
		return fmt.Errorf("consumer: connect: %w", err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer func() { _ = ch.ExchangeDelete(cfg.Exchange, false, false) }()
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		return err
	}
	if err := ch.QueueBind(q.Name, "order.#", cfg.Exchange, false, nil); err != nil {
		return err
	}
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return err
	}
	fmt.Println("bound queue", q.Name, "to order.#")

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

	p := amqpsink.PropertyPrefixDefault
	for received := 0; received < 3; received++ {
		select {
		case m, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("the consumer's channel closed after %d of 3 events", received)
			}
			fmt.Printf("received %s: message-id=%s %stype=%v %ssubject=%v %scorrelationid=%v body=%s\n",
				m.RoutingKey, m.MessageId, p, m.Headers[p+"type"], p, m.Headers[p+"subject"], p, m.Headers[p+"correlationid"], m.Body)
		case <-ctx.Done():
			return fmt.Errorf("received %d of 3 events: %w", received, ctx.Err())
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
