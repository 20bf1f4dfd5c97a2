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
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/examples/internal/demo"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/kafkasink"
)

func main() {
	demo.Main("kafka", demo.Flag{
		Name: "kafka", Env: "KAFKA_URL",
		Usage: "Kafka sink URL (or $KAFKA_URL), such as kafka://127.0.0.1:9092; empty starts an in-process kfake cluster",
	}, run)
}

func run(ctx context.Context, d *demo.Demo, kafkaURL string) error {
	topic := fmt.Sprintf("outbox-example-orders-%d", d.ID)
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

	// One topic for every order event, so the event type says which.
	return d.Relay(ctx, sink, demo.Checkout("order."), func(ctx context.Context) error {
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
		return nil
	})
}

func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}
