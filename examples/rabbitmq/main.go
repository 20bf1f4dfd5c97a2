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
	"fmt"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/examples/internal/demo"
	"github.com/outboxkit/outbox/sink/amqpsink"
)

func main() {
	demo.Main("rabbitmq", demo.Flag{
		Name: "amqp", Env: "AMQP_URL", Default: "amqp://guest:guest@127.0.0.1:5672/",
		Usage: "AMQP sink URL (or $AMQP_URL); see package amqpsink for its options",
	}, run)
}

func run(ctx context.Context, d *demo.Demo, amqpURL string) error {
	// The sink declares a topic exchange of its own; events go out with
	// the routing key {aggregate_type}.{event_type}.
	cfg, err := amqpsink.ConfigFromURL(amqpURL)
	if err != nil {
		return err
	}
	cfg.Exchange = fmt.Sprintf("outbox.example.%d", d.ID)
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

	return d.Relay(ctx, sink, demo.Checkout(""), func(ctx context.Context) error {
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
		return nil
	})
}
