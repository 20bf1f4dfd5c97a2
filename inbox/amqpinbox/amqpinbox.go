// Package amqpinbox consumes a RabbitMQ (AMQP 0-9-1) queue into an inbox
// with manual acknowledgements: each delivery is handed to a receive
// function (an inbox.Inbox's Handle or Store) and acknowledged only after
// that function returned, that is after the inbox transaction committed.
//
//	ch, _ := conn.Channel()
//	in, _ := inbox.New(inbox.Config{Consumer: "billing"})
//	err := amqpinbox.Consume(ctx, ch, "billing.orders", amqpinbox.Config{
//		Receive: func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
//			return in.Handle(ctx, pool, m, apply)
//		},
//	})
//
// A delivery whose transaction failed is negatively acknowledged and
// requeued after Config.RetryDelay; one that can never be stored (no ID,
// a body that is not JSON) is rejected without requeue, which sends it to
// the queue's dead-letter exchange when it has one. Deliveries not yet
// acknowledged when the channel closes (the consumer died) are requeued
// by the broker, and the inbox finds the ones already stored. The message's
// key is what amqpsink sets: the cloudEvents_id (or cloudEvents:id) header,
// else the message-id property, and cloudEvents_source; the other
// cloudEvents_ headers become Message.Headers, type the event type, time
// the event time and the body the payload.
package amqpinbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/sink/amqpsink"
)

// Defaults of Config.
const (
	PrefetchDefault   = 100
	RetryDelayDefault = time.Second
)

// Config configures Consume.
type Config struct {
	// Receive stores one message and returns once it is committed.
	// Required.
	Receive func(ctx context.Context, msg inbox.Message) (inbox.Result, error)
	// Source is Message.Source for deliveries without a source header.
	// Defaults to "amqp:" and the queue's name.
	Source string
	// Prefetch is the most unacknowledged deliveries at once (basic.qos).
	// Defaults to PrefetchDefault.
	Prefetch int
	// RetryDelay is the pause before a delivery whose receive failed is
	// requeued. Defaults to RetryDelayDefault.
	RetryDelay time.Duration
	// Logger receives a warning for each delivery that failed. Defaults
	// to slog.Default().
	Logger *slog.Logger
}

// Consume consumes queue on ch with manual acknowledgements and receives
// each delivery until ctx ends, then returns nil. It returns an error when
// the channel closes under it (the connection was lost): open a new
// channel and call it again; the broker requeued what was not
// acknowledged.
func Consume(ctx context.Context, ch *amqp.Channel, queue string, cfg Config) error {
	if cfg.Receive == nil {
		return &outbox.ConfigError{Field: "Receive", Err: errors.New("is nil: pass the function that stores a message, such as an Inbox's Handle")}
	}
	cfg.Source = cmp.Or(cfg.Source, "amqp:"+queue)
	cfg.Prefetch = cmp.Or(cfg.Prefetch, PrefetchDefault)
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, RetryDelayDefault)
	log := cmp.Or(cfg.Logger, slog.Default()).With(slog.String("component", "amqpinbox"))
	if err := ch.Qos(cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("amqpinbox: set prefetch: %w", err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("amqpinbox: consume %s: %w", queue, err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				if ctx.Err() != nil {
					return nil //nolint:nilerr // a stop ends consumption cleanly
				}
				return fmt.Errorf("amqpinbox: the channel consuming %s closed; its unacknowledged deliveries are requeued", queue)
			}
			receive(ctx, d, cfg, log)
		}
	}
}

// receive stores d and settles it with the broker.
func receive(ctx context.Context, d amqp.Delivery, cfg Config, log *slog.Logger) {
	m, err := Message(d, cfg.Source)
	if err == nil {
		// Not cancelled by a stop: a commit is not cut half way, and the
		// ack follows it.
		_, err = cfg.Receive(context.WithoutCancel(ctx), m)
	}
	if err == nil {
		if err := d.Ack(false); err != nil {
			log.Warn("ack failed; the redelivery will be a duplicate", "message_id", m.ID, "error", err.Error())
		}
		return
	}
	var me *inbox.MessageError
	if errors.As(err, &me) {
		log.Warn("delivery cannot be stored; rejected", "message_id", d.MessageId, "error", err.Error())
		_ = d.Reject(false)
		return
	}
	log.Warn("delivery not stored; requeued", "message_id", m.ID, "error", err.Error())
	select {
	case <-ctx.Done():
	case <-time.After(cfg.RetryDelay):
	}
	_ = d.Nack(false, true)
}

// Message reads an inbox message from a delivery as amqpsink publishes it.
// source is used when there is no source header.
func Message(d amqp.Delivery, source string) (inbox.Message, error) {
	m := inbox.Message{Headers: make(map[string]string, len(d.Headers)), Payload: d.Body}
	for k, v := range d.Headers {
		s, ok := v.(string)
		if !ok {
			continue
		}
		attr, found := strings.CutPrefix(k, "cloudEvents_")
		if !found {
			attr, found = strings.CutPrefix(k, "cloudEvents:")
		}
		switch {
		case found && attr != "":
			m.Headers[attr] = s
		case k == outbox.HeaderTraceParent || k == outbox.HeaderTraceState:
			m.Headers[k] = s
		}
	}
	m.ID = cmp.Or(m.Headers["id"], d.MessageId)
	m.Source = cmp.Or(m.Headers["source"], source)
	m.EventType = cmp.Or(m.Headers["type"], d.Type)
	if t, err := time.Parse(time.RFC3339Nano, m.Headers["time"]); err == nil {
		m.Time = t
	}
	if len(d.Body) == 0 {
		m.Payload = nil
	}
	return m, inbox.CheckMessage(m)
}

// Source is a broker connection and queue opened from an amqp:// URL.
type Source struct {
	// Conn is the connection; open a channel on it for Consume.
	Conn *amqp.Connection
	// Queue is the queue to consume.
	Queue string
}

// Close closes the connection.
func (s *Source) Close() error { return s.Conn.Close() }

// Open connects with an amqp:// or amqps:// URL in amqpsink's form
// (credentials, vhost, TLS and connection options) plus queue=NAME, the
// queue to consume, which must exist. The publishing options (exchange,
// route, source, …) are refused.
func Open(ctx context.Context, rawURL string) (*Source, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, &outbox.ConfigError{Field: "URL", Err: errors.New("is not a URL: use amqp://user:pass@host:5672/?queue=NAME")}
	}
	q := u.Query()
	queue := q.Get("queue")
	if queue == "" {
		return nil, &outbox.ConfigError{Field: "URL", Err: errors.New("names no queue: add ?queue=NAME, a queue bound to the relay's exchange")}
	}
	for _, sinkOnly := range []string{"exchange", "exchange_type", "declare_exchange", "route", "source", "property_prefix", "unroutable"} {
		if q.Has(sinkOnly) {
			return nil, &outbox.ConfigError{Field: "URL", Err: fmt.Errorf("option %s is for publishing: remove it", sinkOnly)}
		}
	}
	q.Del("queue")
	u.RawQuery = q.Encode()
	cfg, err := amqpsink.ConfigFromURL(u.String())
	if err != nil {
		return nil, err
	}
	cfg.ConnectionName = cmp.Or(cfg.ConnectionName, "outbox-amqpinbox")
	conn, err := amqpsink.Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		_, err = ch.QueueDeclarePassive(queue, false, false, false, false, nil)
		_ = ch.Close()
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("amqpinbox: queue %s: %w (declare it and bind it to the relay's exchange)", queue, err)
	}
	return &Source{Conn: conn, Queue: queue}, nil
}
