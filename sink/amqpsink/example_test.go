package amqpsink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/amqpsink"
)

// Publishing an event to a queue through the default exchange, and reading
// it back.
func Example() {
	ctx := context.Background()
	cfg, err := amqpsink.ConfigFromURL(broker.URL() + "?route=example.%7Bevent_type%7D")
	if err != nil {
		log.Fatal(err)
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	sink, err := amqpsink.New(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()

	// A consumer's queue, named like the routing key.
	conn, err := amqp.Dial(broker.URL())
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	q, err := ch.QueueDeclare("example.invoice.paid", false, true, false, false, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer ch.QueueDelete(q.Name, false, false, false)

	errs := sink.Publish(ctx, []outbox.Event{{
		ID: 42, EventType: "invoice.paid", AggregateType: "invoice", AggregateID: "inv-7",
		Payload:   json.RawMessage(`{"amount_cents": 9900}`),
		CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
	}})
	fmt.Println("confirmed:", errs == nil)

	var m amqp.Delivery
	for ok := false; !ok; {
		if m, ok, err = ch.Get(q.Name, true); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("message-id:", m.MessageId)
	fmt.Println("content-type:", m.ContentType)
	fmt.Println("cloudEvents_type:", m.Headers["cloudEvents_type"])
	fmt.Println("cloudEvents_subject:", m.Headers["cloudEvents_subject"])
	fmt.Println("body:", string(m.Body))
	// Output:
	// confirmed: true
	// message-id: 42
	// content-type: application/json
	// cloudEvents_type: invoice.paid
	// cloudEvents_subject: inv-7
	// body: {"amount_cents": 9900}
}
