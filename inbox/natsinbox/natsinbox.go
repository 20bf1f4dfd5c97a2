// Package natsinbox consumes a NATS JetStream pull consumer into an inbox:
// each message is handed to a receive function (an inbox.Inbox's Handle or
// Store) and acknowledged only after that function returned, that is after
// the inbox transaction committed. A message whose transaction failed is
// negatively acknowledged and redelivered; a redelivery of a message
// recorded before is a duplicate, acknowledged without effect.
//
//	js, _ := jetstream.New(nc)
//	cons, _ := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
//		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy,
//	})
//	in, _ := inbox.New(inbox.Config{Consumer: "billing"})
//	err := natsinbox.Consume(ctx, cons, natsinbox.Config{
//		Receive: func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
//			return in.Handle(ctx, pool, m, apply)
//		},
//	})
//
// The message's identity is what the relay's natssink puts on it: the
// CloudEvents ce-id and ce-source headers (falling back to Nats-Msg-Id and
// Config.Source), so a message published twice by a relay that restarted is
// recognized even after the stream's duplicate window. The other ce-*
// headers become Message.Headers, ce-type the event type and ce-time the
// event time.
package natsinbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/sink/natssink"
)

// Defaults of Config.
const (
	BatchSizeDefault = 100
	MaxWaitDefault   = 5 * time.Second
	NakDelayDefault  = time.Second
)

// Config configures Consume.
type Config struct {
	// Receive stores one message and returns once it is committed, such
	// as a closure over an inbox.Inbox's Handle or Store. Required.
	Receive func(ctx context.Context, msg inbox.Message) (inbox.Result, error)
	// Source is Message.Source for messages without a ce-source header.
	// Defaults to "nats:" and the consumer's stream name.
	Source string
	// BatchSize is the most messages one fetch takes. Defaults to
	// BatchSizeDefault.
	BatchSize int
	// MaxWait bounds how long one fetch waits for messages. Defaults to
	// MaxWaitDefault.
	MaxWait time.Duration
	// NakDelay is how long a message whose Receive failed waits before
	// JetStream redelivers it. Defaults to NakDelayDefault.
	NakDelay time.Duration
	// Logger receives a warning for each message that failed. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Consume fetches messages from cons and receives them one by one until
// ctx ends, then returns nil; it returns an error only when the consumer
// cannot be fetched from for good (deleted). The consumer must use explicit
// acks (jetstream.AckExplicitPolicy).
//
// A message that Receive stored, or found stored before, is acknowledged
// with a double ack (the server confirms it); one whose Receive failed is
// negatively acknowledged with Config.NakDelay and comes back; one that can
// never be stored (no ID, a payload that is not JSON) is terminated and
// logged.
func Consume(ctx context.Context, cons jetstream.Consumer, cfg Config) error {
	if cfg.Receive == nil {
		return &outbox.ConfigError{Field: "Receive", Err: errors.New("is nil: pass the function that stores a message, such as an Inbox's Handle")}
	}
	cfg.BatchSize = cmp.Or(cfg.BatchSize, BatchSizeDefault)
	cfg.MaxWait = cmp.Or(cfg.MaxWait, MaxWaitDefault)
	cfg.NakDelay = cmp.Or(cfg.NakDelay, NakDelayDefault)
	if cfg.BatchSize < 0 || cfg.MaxWait < 0 || cfg.NakDelay < 0 {
		return &outbox.ConfigError{Field: "BatchSize", Err: errors.New("BatchSize, MaxWait and NakDelay must not be negative")}
	}
	logger := cmp.Or(cfg.Logger, slog.Default()).With(slog.String("component", "natsinbox"))
	if cfg.Source == "" {
		cfg.Source = "nats:" + cons.CachedInfo().Stream
	}
	for ctx.Err() == nil {
		batch, err := cons.Fetch(cfg.BatchSize, jetstream.FetchMaxWait(cfg.MaxWait))
		if err != nil {
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				return fmt.Errorf("natsinbox: fetch: %w", err)
			}
			logger.Warn("fetch failed; trying again", "error", err.Error())
			select {
			case <-ctx.Done():
			case <-time.After(cfg.NakDelay):
			}
			continue
		}
		for msg := range batch.Messages() {
			receiveOne(ctx, msg, cfg, logger)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			logger.Warn("fetch ended with an error", "error", err.Error())
		}
	}
	return nil
}

// receiveOne receives msg and settles it with JetStream. The inbox
// transaction runs without ctx's cancellation, so a stop does not abort a
// commit half way; the ack follows the commit.
func receiveOne(ctx context.Context, msg jetstream.Msg, cfg Config, logger *slog.Logger) {
	m, err := Message(msg.Headers(), msg.Data(), cfg.Source)
	if err != nil {
		logger.Warn("message cannot be stored; terminated", "subject", msg.Subject(), "error", err.Error())
		_ = msg.Term()
		return
	}
	res, err := cfg.Receive(context.WithoutCancel(ctx), m)
	if err != nil {
		var me *inbox.MessageError
		if errors.As(err, &me) {
			logger.Warn("message cannot be stored; terminated", "message_id", m.ID, "error", err.Error())
			_ = msg.Term()
			return
		}
		logger.Warn("message not stored; it will be redelivered", "message_id", m.ID, "error", err.Error())
		_ = msg.NakWithDelay(cfg.NakDelay)
		return
	}
	ackCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(ackCtx); err != nil {
		// The inbox holds the message: its redelivery is a duplicate.
		logger.Warn("ack failed; the redelivery will be a duplicate", "message_id", m.ID, "duplicate", res.Duplicate, "error", err.Error())
	}
}

// Message reads an inbox message from a NATS message's headers and data as
// natssink writes them. source is used when there is no ce-source header.
func Message(h nats.Header, data []byte, source string) (inbox.Message, error) {
	m := inbox.Message{Headers: map[string]string{}, Payload: data}
	for name, values := range h {
		attr, ok := strings.CutPrefix(strings.ToLower(name), "ce-")
		if !ok || attr == "" || len(values) == 0 {
			continue
		}
		v := values[0]
		if dec, err := url.PathUnescape(v); err == nil {
			v = dec
		}
		m.Headers[attr] = v
	}
	for _, name := range []string{outbox.HeaderTraceParent, outbox.HeaderTraceState} {
		if v := h.Get(name); v != "" {
			m.Headers[name] = v
		}
	}
	m.ID = cmp.Or(m.Headers["id"], h.Get(jetstream.MsgIDHeader))
	m.Source = cmp.Or(m.Headers["source"], source)
	m.EventType = m.Headers["type"]
	if t, err := time.Parse(time.RFC3339Nano, m.Headers["time"]); err == nil {
		m.Time = t
	}
	if len(data) == 0 {
		m.Payload = nil
	}
	return m, inbox.CheckMessage(m)
}

// Source is a JetStream consumer opened from a nats:// URL.
type Source struct {
	// Consumer is the durable pull consumer, created when missing with
	// explicit acks.
	Consumer jetstream.Consumer
	sink     *natssink.Sink
}

// Close closes the connection.
func (s *Source) Close() error { return s.sink.Close() }

// Open connects with a nats:// URL in natssink's form (servers,
// credentials, TLS options, stream=NAME, which is required) plus
// consumer=NAME, the durable consumer to pull from (durable when not in
// the URL), created when missing with explicit acks on every subject of
// the stream. The sink-only options (route, create_stream, …) are refused.
func Open(ctx context.Context, rawURL, durable string) (*Source, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, &outbox.ConfigError{Field: "URL", Err: errors.New("is not a URL: use nats://host:4222?stream=ORDERS&consumer=billing")}
	}
	q := u.Query()
	if v := q.Get("consumer"); v != "" {
		durable = v
	}
	for _, sinkOnly := range []string{"route", "create_stream", "stream_subjects", "duplicate_window", "source", "ack_timeout", "max_pending"} {
		if q.Has(sinkOnly) {
			return nil, &outbox.ConfigError{Field: "URL", Err: fmt.Errorf("option %s is for publishing: remove it", sinkOnly)}
		}
	}
	q.Del("consumer")
	u.RawQuery = q.Encode()
	cfg, err := natssink.ConfigFromURL(u.String())
	if err != nil {
		return nil, err
	}
	if cfg.Stream == "" {
		return nil, &outbox.ConfigError{Field: "URL", Err: errors.New("names no stream: add ?stream=NAME, the stream the relay publishes to")}
	}
	if durable == "" {
		return nil, &outbox.ConfigError{Field: "URL", Err: errors.New("names no consumer: add &consumer=NAME")}
	}
	cfg.Name = cmp.Or(cfg.Name, "outbox-natsinbox")
	sink, err := natssink.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(sink.Conn())
	if err == nil {
		var cons jetstream.Consumer
		cons, err = js.CreateOrUpdateConsumer(ctx, cfg.Stream, jetstream.ConsumerConfig{Durable: durable, AckPolicy: jetstream.AckExplicitPolicy})
		if err == nil {
			return &Source{Consumer: cons, sink: sink}, nil
		}
	}
	_ = sink.Close()
	return nil, fmt.Errorf("natsinbox: consumer %s on stream %s: %w", durable, cfg.Stream, err)
}

// Pending returns what the broker still holds for cons: the stream's
// messages it has not delivered yet (NumPending) plus the ones delivered
// and not acknowledged (NumAckPending), read from the server's consumer
// info in one request. A receiver that keeps up holds it near 0.
func Pending(ctx context.Context, cons jetstream.Consumer) (int64, error) {
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("natsinbox: consumer info: %w", err)
	}
	return int64(info.NumPending) + int64(info.NumAckPending), nil
}
