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
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/outboxkit/outbox/examples/internal/demo"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/mqttsink"
)

func main() {
	demo.Main("mqtt", demo.Flag{
		Name: "mqtt", Env: "MQTT_URL", Default: "mqtt://127.0.0.1:1883",
		Usage: "MQTT sink URL (or $MQTT_URL); see package mqttsink for its options",
	}, run)
}

func run(ctx context.Context, d *demo.Demo, mqttURL string) error {
	// Topics in MQTT's slash-separated style.
	cfg, err := mqttsink.ConfigFromURL(mqttURL)
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("outbox-example-%d", d.ID)
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

	return d.Relay(ctx, sink, demo.Checkout(""), func(ctx context.Context) error {
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
		return nil
	})
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
