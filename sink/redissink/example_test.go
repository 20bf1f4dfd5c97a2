package redissink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/redissink"
)

// Appending an event to a stream and reading the entry back.
func Example() {
	ctx := context.Background()
	cfg, err := redissink.ConfigFromURL(server.URL() + "?route=example.%7Baggregate_type%7D&maxlen=1000")
	if err != nil {
		log.Fatal(err)
	}
	sink, err := redissink.New(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()

	opts, err := redis.ParseURL(server.URL())
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	defer rdb.Del(ctx, "example.invoice")

	errs := sink.Publish(ctx, []outbox.Event{{
		ID: 42, EventType: "invoice.paid", AggregateType: "invoice", AggregateID: "inv-7",
		Payload:   json.RawMessage(`{"amount_cents": 9900}`),
		CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
	}})
	fmt.Println("appended:", errs == nil)

	entries, err := rdb.XRevRangeN(ctx, "example.invoice", "+", "-", 1).Result()
	if err != nil {
		log.Fatal(err)
	}
	for _, field := range []string{"id", "type", "subject", "time", "data"} {
		fmt.Printf("%s: %s\n", field, entries[0].Values[field])
	}
	// Output:
	// appended: true
	// id: 42
	// type: invoice.paid
	// subject: inv-7
	// time: 2024-05-06T07:08:09Z
	// data: {"amount_cents": 9900}
}
