// Command nats shows the outbox end to end with NATS JetStream: it migrates
// a schema of its own, writes three events in one transaction, relays them
// with natssink into a stream it creates, and reads them back with a
// JetStream consumer, printing what arrived. It removes the schema and the
// stream when done.
//
//	go run ./examples/nats -db postgres://postgres@127.0.0.1:5432/test -nats nats://127.0.0.1:4222
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/natssink"
)

func main() {
	dbURL := flag.String("db", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL (or $DATABASE_URL)")
	natsURL := flag.String("nats", envOr("NATS_URL", "nats://127.0.0.1:4222"), "NATS sink URL (or $NATS_URL); see package natssink for its options")
	flag.Parse()
	if err := run(*dbURL, *natsURL); err != nil {
		fmt.Fprintln(os.Stderr, "examples/nats:", err)
		os.Exit(1)
	}
}

func run(dbURL, natsURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	db := outbox.Postgres(pool)
	id := rand.Uint32()
	schema := fmt.Sprintf("outbox_example_nats_%d", id)
	if _, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{Schema: schema}); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer dropSchema(pool, schema)
	fmt.Println("migrated schema", schema)

	// The sink creates a stream of its own for the subjects it routes to.
	cfg, err := natssink.ConfigFromURL(natsURL)
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("example%d", id)
	cfg.Stream = fmt.Sprintf("OUTBOX_EXAMPLE_%d", id)
	cfg.CreateStream = true
	cfg.StreamSubjects = []string{prefix + ".>"}
	if cfg.Router, err = route.New(prefix + ".{aggregate_type}.{event_type}"); err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	sink, err := natssink.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = sink.Close() }()
	fmt.Println("created stream", cfg.Stream, "for", prefix+".>")

	// A consumer, as another service would run it.
	nc, err := nats.Connect(strings.Join(cfg.Servers, ","), consumerOptions(cfg)...)
	if err != nil {
		return fmt.Errorf("consumer: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), cfg.Stream) }()

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

	cons, err := js.OrderedConsumer(ctx, cfg.Stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	for received := 0; received < 3; {
		batch, err := cons.Fetch(3-received, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return err
		}
		for m := range batch.Messages() {
			h := m.Headers()
			fmt.Printf("received %s: ce-id=%s ce-type=%s ce-subject=%s ce-correlationid=%s Nats-Msg-Id=%s data=%s\n",
				m.Subject(), h.Get("ce-id"), h.Get("ce-type"), h.Get("ce-subject"), h.Get("ce-correlationid"),
				h.Get(jetstream.MsgIDHeader), m.Data())
			received++
		}
		if err := batch.Error(); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("received %d of 3 events: %w", received, err)
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

// consumerOptions connects the consumer the way the sink connects.
func consumerOptions(cfg natssink.Config) []nats.Option {
	var opts []nats.Option
	switch {
	case cfg.Token != "":
		opts = append(opts, nats.Token(cfg.Token))
	case cfg.User != "":
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	case cfg.CredsFile != "":
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.TLS != nil {
		opts = append(opts, nats.Secure(cfg.TLS))
	}
	return opts
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
