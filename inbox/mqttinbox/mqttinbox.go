// Package mqttinbox consumes an MQTT 3.1.1 subscription (QoS 1) into an
// inbox: each message is handed to a receive function (an inbox.Inbox's
// Handle or Store) and acknowledged (PUBACK) only after that function
// returned, that is after the inbox transaction committed.
//
//	opts := mqtt.NewClientOptions().AddBroker("tcp://127.0.0.1:1883").
//		SetClientID("billing-1").SetCleanSession(false).SetAutoAckDisabled(true)
//	client := mqtt.NewClient(opts) // unconnected: Consume connects it
//	err := mqttinbox.Consume(ctx, client, "shop/#", mqttinbox.Config{
//		Receive: func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
//			return in.Handle(ctx, pool, m, apply)
//		},
//	})
//
// The client must disable automatic acks (SetAutoAckDisabled) and keep a
// persistent session (SetCleanSession(false) with a fixed client ID): then
// a message the process did not acknowledge before it died is delivered
// again when it reconnects, and the inbox finds it if it was stored. MQTT
// 3.1.1 has no negative acknowledgement, so a message whose transaction
// failed is received again in place, after Config.RetryDelay, until it is
// stored or ctx ends.
//
// Messages are what mqttsink publishes: CloudEvents JSON events in
// structured mode. The key is the event's id and source members; its other
// string members become Message.Headers, type the event type, time the
// event time and data the payload.
package mqttinbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/sink/mqttsink"
)

// RetryDelayDefault is Config.RetryDelay's default.
const RetryDelayDefault = time.Second

// Config configures Consume.
type Config struct {
	// Receive stores one message and returns once it is committed.
	// Required.
	Receive func(ctx context.Context, msg inbox.Message) (inbox.Result, error)
	// Source is Message.Source for events without a source member.
	// Defaults to "mqtt:" and the message's topic.
	Source string
	// RetryDelay is the pause before a message whose receive failed is
	// received again. Defaults to RetryDelayDefault.
	RetryDelay time.Duration
	// Logger receives a warning for each message that failed. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// OnSubscribed, when set, is called once the broker confirmed the
	// subscription: from then on every message published to the topic
	// reaches this consumer (a readiness signal).
	OnSubscribed func()
}

// subscribeTimeout bounds the SUBSCRIBE round trip.
const subscribeTimeout = 30 * time.Second

// Consume subscribes client (automatic acks disabled) to topic with QoS 1 and
// receives each message until ctx ends, then returns nil. It leaves the
// subscription in place: the broker keeps what is published to the topic
// for the persistent session while the consumer is down (a restart, a
// deploy), and the next Consume with the same client ID receives it.
//
// Pass client unconnected: Consume registers its handler and then connects.
// A broker sends the messages it kept for a persistent session right after
// the connection, before any SUBSCRIBE; a client connected before the
// handler existed drops them unacknowledged, and the broker sends them again
// only on the next connection.
func Consume(ctx context.Context, client mqtt.Client, topic string, cfg Config) error {
	if cfg.Receive == nil {
		return &outbox.ConfigError{Field: "Receive", Err: errors.New("is nil: pass the function that stores a message, such as an Inbox's Handle")}
	}
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, RetryDelayDefault)
	log := cmp.Or(cfg.Logger, slog.Default()).With(slog.String("component", "mqttinbox"))
	client.AddRoute(topic, func(_ mqtt.Client, msg mqtt.Message) { receive(ctx, msg, cfg, log) })
	if !client.IsConnectionOpen() {
		if err := connect(ctx, client); err != nil {
			return err
		}
	}
	tok := client.Subscribe(topic, 1, nil)
	if !tok.WaitTimeout(subscribeTimeout) {
		return fmt.Errorf("mqttinbox: subscribe to %s: no answer within %s", topic, subscribeTimeout)
	}
	if err := tok.Error(); err != nil {
		return fmt.Errorf("mqttinbox: subscribe to %s: %w", topic, err)
	}
	if cfg.OnSubscribed != nil {
		cfg.OnSubscribed()
	}
	<-ctx.Done()
	return nil
}

// receive stores msg, retrying until it is stored or ctx ends, and then
// acknowledges it; a message ctx ended on stays unacknowledged for the
// next session.
func receive(ctx context.Context, msg mqtt.Message, cfg Config, log *slog.Logger) {
	m, err := Message(msg.Payload(), cmp.Or(cfg.Source, "mqtt:"+msg.Topic()))
	if err != nil {
		log.Warn("message cannot be stored; acknowledged without effect", "topic", msg.Topic(), "error", err.Error())
		msg.Ack()
		return
	}
	for {
		if ctx.Err() != nil {
			return
		}
		_, err := cfg.Receive(context.WithoutCancel(ctx), m)
		if err == nil {
			msg.Ack()
			return
		}
		var me *inbox.MessageError
		if errors.As(err, &me) {
			log.Warn("message cannot be stored; acknowledged without effect", "message_id", m.ID, "error", err.Error())
			msg.Ack()
			return
		}
		log.Warn("message not stored; receiving it again", "message_id", m.ID, "error", err.Error())
		select {
		case <-ctx.Done():
		case <-time.After(cfg.RetryDelay):
		}
	}
}

// Message reads an inbox message from a CloudEvents JSON event as
// mqttsink publishes it. source is used when it has no source member.
func Message(payload []byte, source string) (inbox.Message, error) {
	return inbox.StructuredMessage(payload, source)
}

// Open connects a consumer client with an mqtt:// (tcp://, mqtts://, ssl://)
// URL in mqttsink's form (credentials, TLS and connection options) plus
// topic=FILTER, the topic filter to subscribe to (required), and
// client_id=ID (else clientID): the persistent session's client ID, which
// must stay the same across restarts. The publishing options (route,
// source) are refused. It returns the client, not yet connected (Consume
// connects it), and the filter.
func Open(rawURL, clientID string) (mqtt.Client, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, "", &outbox.ConfigError{Field: "URL", Err: errors.New("is not a URL: use mqtt://host:1883?topic=shop/%23")}
	}
	q := u.Query()
	topic := q.Get("topic")
	if topic == "" {
		return nil, "", &outbox.ConfigError{Field: "URL", Err: errors.New("names no topic: add ?topic=FILTER (percent-encode # as %23)")}
	}
	for _, sinkOnly := range []string{"route", "source"} {
		if q.Has(sinkOnly) {
			return nil, "", &outbox.ConfigError{Field: "URL", Err: fmt.Errorf("option %s is for publishing: remove it", sinkOnly)}
		}
	}
	q.Del("topic")
	u.RawQuery = q.Encode()
	cfg, err := mqttsink.ConfigFromURL(u.String())
	if err != nil {
		return nil, "", err
	}
	cfg.ClientID = cmp.Or(cfg.ClientID, clientID)
	opts, err := mqttsink.ConsumerOptions(cfg)
	if err != nil {
		return nil, "", err
	}
	return mqtt.NewClient(opts), topic, nil
}

// connect connects client, giving up when ctx ends (paho's connect takes no
// context: it then waits for the attempt and disconnects).
func connect(ctx context.Context, client mqtt.Client) error {
	tok := client.Connect()
	select {
	case <-tok.Done():
	case <-ctx.Done():
		<-tok.Done()
		client.Disconnect(0)
		return fmt.Errorf("mqttinbox: connect: gave up: %w", context.Cause(ctx))
	}
	if err := tok.Error(); err != nil {
		return fmt.Errorf("mqttinbox: connect: %w", err)
	}
	return nil
}
