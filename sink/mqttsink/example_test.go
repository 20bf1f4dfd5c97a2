package mqttsink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/mqttsink"
)

// Publishing an event and receiving it as a CloudEvents JSON message.
func Example() {
	ctx := context.Background()
	cfg, err := mqttsink.ConfigFromURL(broker.URL() + "?route=example%2F%7Baggregate_type%7D%2F%7Bevent_type%7D")
	if err != nil {
		log.Fatal(err)
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	sink, err := mqttsink.New(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()

	// A subscriber.
	received := make(chan mqtt.Message, 1)
	sub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(broker.URL()).SetClientID("example-subscriber"))
	if tok := sub.Connect(); tok.Wait() && tok.Error() != nil {
		log.Fatal(tok.Error())
	}
	defer sub.Disconnect(100)
	if tok := sub.Subscribe("example/invoice/#", 1, func(_ mqtt.Client, m mqtt.Message) { received <- m }); tok.Wait() && tok.Error() != nil {
		log.Fatal(tok.Error())
	}

	errs := sink.Publish(ctx, []outbox.Event{{
		ID: 42, EventType: "invoice.paid", AggregateType: "invoice", AggregateID: "inv-7",
		Payload:   json.RawMessage(`{"amount_cents": 9900}`),
		CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
	}})
	fmt.Println("acknowledged:", errs == nil)
	m := <-received
	fmt.Println("topic:", m.Topic())
	fmt.Println(string(m.Payload()))
	// Output:
	// acknowledged: true
	// topic: example/invoice/invoice.paid
	// {"specversion":"1.0","id":"42","type":"invoice.paid","source":"/outbox","subject":"inv-7","time":"2024-05-06T07:08:09Z","datacontenttype":"application/json","aggregatetype":"invoice","data":{"amount_cents": 9900}}
}
