// Command mqtt shows the outbox end to end with an MQTT broker: it migrates
// a schema of its own, writes three events in one transaction, relays them
// with mqttsink, and receives them with an MQTT subscriber, printing what
// arrived. It removes the schema when done.
//
//	go run ./examples/mqtt -db postgres://postgres@127.0.0.1:5432/test -mqtt mqtt://127.0.0.1:1883
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/mqttsink"
)

func main() {
	dbURL := flag.String("db", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL (or $DATABASE_URL)")
	mqttURL := flag.String("mqtt", envOr("MQTT_URL", "mqtt://127.0.0.1:1883"), "MQTT sink URL (or $MQTT_URL); see package mqttsink for its options")
	flag.Parse()
	if err := run(*dbURL, *mqttURL); err != nil {
		fmt.Fprintln(os.Stderr, "examples/mqtt:", err)
		os.Exit(1)
	}
}

func run(dbURL, mqttURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	db := outbox.Postgres(pool)
	id := rand.Uint32()
	schema := fmt.Sprintf("outbox_example_mqtt_%d", id)
	if _, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{Schema: schema}); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer dropSchema(pool, schema)
	fmt.Println("migrated schema", schema)

	// Topics in MQTT's slash-separated style.
	cfg, err := mqttsink.ConfigFromURL(mqttURL)
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("outbox-example-%d", id)
	if cfg.Router, err = route.New(prefix + "/{aggregate_type}/{event_type}"); err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	sink, err := mqttsink.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = sink.Close() }()

	// A subscriber, as another service would run it. It subscribes before
	// the events are relayed: MQTT brokers keep no history for topics
	// without a subscription.
	received := make(chan mqtt.Message, 3)
	sub, err := subscribe(cfg.URL, prefix+"/order/#", received)
	if err != nil {
		return err
	}
	defer sub.Disconnect(250)
	fmt.Println("subscribed to", prefix+"/order/#")

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

	for n := 0; n < 3; n++ {
		select {
		case m := <-received:
			// Structured mode: the CloudEvents attributes and the payload
			// (as "data") in one JSON document.
			var ce struct {
				ID            string          `json:"id"`
				Type          string          `json:"type"`
				Subject       string          `json:"subject"`
				CorrelationID string          `json:"correlationid"`
				Data          json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal(m.Payload(), &ce); err != nil {
				return fmt.Errorf("decode %s: %w", m.Topic(), err)
			}
			fmt.Printf("received %s: id=%s type=%s subject=%s correlationid=%s data=%s\n",
				m.Topic(), ce.ID, ce.Type, ce.Subject, ce.CorrelationID, ce.Data)
		case <-ctx.Done():
			return fmt.Errorf("received %d of 3 events: %w", n, ctx.Err())
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

// subscribe connects a subscriber to the broker of sinkURL (with its
// credentials) and subscribes to filter with QoS 1.
func subscribe(sinkURL, filter string, received chan<- mqtt.Message) (mqtt.Client, error) {
	u, err := url.Parse(sinkURL)
	if err != nil {
		return nil, err
	}
	opts := mqtt.NewClientOptions().AddBroker((&url.URL{Scheme: u.Scheme, Host: u.Host}).String()).
		SetClientID(fmt.Sprintf("outbox-example-subscriber-%d", rand.Uint32())).SetCleanSession(true)
	if u.User != nil {
		opts.SetUsername(u.User.Username())
		pw, _ := u.User.Password()
		opts.SetPassword(pw)
	}
	c := mqtt.NewClient(opts)
	if tok := c.Connect(); tok.Wait() && tok.Error() != nil {
		return nil, fmt.Errorf("subscriber: connect: %w", tok.Error())
	}
	if tok := c.Subscribe(filter, 1, func(_ mqtt.Client, m mqtt.Message) { received <- m }); tok.Wait() && tok.Error() != nil {
		c.Disconnect(0)
		return nil, fmt.Errorf("subscriber: subscribe: %w", tok.Error())
	}
	return c, nil
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
