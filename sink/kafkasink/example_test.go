package kafkasink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/kafkasink"
)

// Producing an event to an in-process kfake cluster and consuming the
// record back.
func Example() {
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "shop.order"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()

	cfg, err := kafkasink.ConfigFromURL("kafka://" + cluster.ListenAddrs()[0] + "?route=shop.{aggregate_type}")
	if err != nil {
		log.Fatal(err)
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	sink, err := kafkasink.New(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()

	errs := sink.Publish(ctx, []outbox.Event{{
		ID: 42, EventType: "order.created", AggregateType: "order", AggregateID: "o-1",
		Payload:   json.RawMessage(`{"total": 12.50}`),
		Headers:   map[string]string{outbox.HeaderCorrelationID: "c-7"},
		CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
	}})
	fmt.Println("delivered:", errs == nil)

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("shop.order"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	r := consumer.PollFetches(ctx).Records()[0]
	fmt.Printf("topic: %s\nkey: %s\n", r.Topic, r.Key)
	for _, h := range r.Headers {
		fmt.Printf("%s: %s\n", h.Key, h.Value)
	}
	fmt.Printf("value: %s\n", r.Value)
	// Output:
	// delivered: true
	// topic: shop.order
	// key: o-1
	// ce_specversion: 1.0
	// ce_id: 42
	// ce_type: order.created
	// ce_source: /outbox
	// ce_subject: o-1
	// ce_time: 2024-05-06T07:08:09Z
	// content-type: application/json
	// ce_aggregatetype: order
	// ce_correlationid: c-7
	// value: {"total": 12.50}
}
