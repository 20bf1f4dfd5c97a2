package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/amqpsink"
	"github.com/outboxkit/outbox/sink/kafkasink"
	"github.com/outboxkit/outbox/sink/natssink"
	"github.com/outboxkit/outbox/sink/redissink"
)

// benchCleanupTimeout bounds removing what a bench's --sink created.
const benchCleanupTimeout = 30 * time.Second

// brokerCleanup removes, after a bench, what the bench's --sink created on
// its broker and did not find there before: the NATS stream of
// create_stream, the Redis stream keys its events went to, the RabbitMQ
// exchange of declare_exchange, the Kafka topics auto_create_topics made.
// What existed before the bench stays, including the messages the bench
// published into it. MQTT (clean session, messages not retained) and
// webhooks leave nothing to remove.
type brokerCleanup struct {
	// wrap, when set, wraps the opened sink to see what it creates.
	wrap func(outbox.Sink) outbox.Sink
	// remove removes what was created and says what it removed.
	remove func(ctx context.Context) ([]string, error)
}

// prepareBenchCleanup looks at the broker raw names before the bench's
// sink is opened (which may create a stream or an exchange). It returns
// nil when the sink creates nothing to remove.
func prepareBenchCleanup(ctx context.Context, raw string) (*brokerCleanup, error) {
	switch sinkSchemeOf(raw) {
	case "nats":
		return natsCleanup(ctx, raw)
	case "redis", "rediss":
		return redisCleanup(raw)
	case "amqp", "amqps":
		return amqpCleanup(ctx, raw)
	case "kafka":
		return kafkaCleanup(raw)
	}
	return nil, nil
}

// natsCleanup deletes the stream create_stream names when it did not exist
// before the bench.
func natsCleanup(ctx context.Context, raw string) (*brokerCleanup, error) {
	cfg, err := natssink.ConfigFromURL(raw)
	if err != nil || !cfg.CreateStream || cfg.Stream == "" {
		return nil, nil //nolint:nilerr // openSink reports a bad URL
	}
	stream := cfg.Stream
	// A sink that checks no stream: the connection with the URL's
	// servers, credentials and TLS.
	probe := cfg
	probe.Stream, probe.CreateStream, probe.StreamSubjects = "", false, nil
	probe.Logger = slog.New(slog.DiscardHandler) // the bench's sink logs the same
	open := func(ctx context.Context) (jetstream.JetStream, func(), error) {
		s, err := natssink.New(ctx, probe)
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(s.Conn())
		if err != nil {
			_ = s.Close()
			return nil, nil, err
		}
		return js, func() { _ = s.Close() }, nil
	}
	js, done, err := open(ctx)
	if err != nil {
		return nil, nil //nolint:nilerr // openSink reports the same connect error
	}
	defer done()
	switch _, err := js.Stream(ctx, stream); {
	case err == nil:
		return nil, nil // the user's stream: it stays
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("look up NATS stream %q for the bench: %w", stream, err)
	}
	return &brokerCleanup{remove: func(ctx context.Context) ([]string, error) {
		js, done, err := open(ctx)
		if err != nil {
			return nil, fmt.Errorf("connect to remove NATS stream %q: %w", stream, err)
		}
		defer done()
		if err := js.DeleteStream(ctx, stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("delete NATS stream %q: %w", stream, err)
		}
		return []string{"NATS stream " + stream}, nil
	}}, nil
}

// amqpCleanup deletes the exchange declare_exchange names when it did not
// exist before the bench.
func amqpCleanup(ctx context.Context, raw string) (*brokerCleanup, error) {
	cfg, err := amqpsink.ConfigFromURL(raw)
	if err != nil || !cfg.DeclareExchange || cfg.Exchange == "" {
		return nil, nil //nolint:nilerr // openSink reports a bad URL
	}
	exchange := cfg.Exchange
	cfg.DeclareExchange = false // Dial would declare it
	exists, err := amqpExchangeExists(ctx, cfg)
	if err != nil || exists {
		return nil, nil //nolint:nilerr // openSink reports the same connect error
	}
	return &brokerCleanup{remove: func(ctx context.Context) ([]string, error) {
		conn, err := amqpsink.Dial(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("connect to remove RabbitMQ exchange %q: %w", exchange, err)
		}
		defer func() { _ = conn.Close() }()
		ch, err := conn.Channel()
		if err != nil {
			return nil, fmt.Errorf("remove RabbitMQ exchange %q: %w", exchange, err)
		}
		if err := ch.ExchangeDelete(exchange, false, false); err != nil {
			return nil, fmt.Errorf("delete RabbitMQ exchange %q: %w", exchange, err)
		}
		return []string{"RabbitMQ exchange " + exchange}, nil
	}}, nil
}

// amqpExchangeExists declares cfg's exchange passively, which fails with
// 404 NOT_FOUND (and closes the channel) when it is missing.
func amqpExchangeExists(ctx context.Context, cfg amqpsink.Config) (bool, error) {
	conn, err := amqpsink.Dial(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return false, err
	}
	err = ch.ExchangeDeclarePassive(cfg.Exchange, cfg.WithDefaults().ExchangeType, true, false, false, false, nil)
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return false, nil
	}
	return err == nil, err
}

// redisCleanup deletes the stream keys the bench's events went to that did
// not exist before: the sink's router names them, and each key is looked
// up the first time an event goes to it, before the sink's XADD creates it.
func redisCleanup(raw string) (*brokerCleanup, error) {
	cfg, err := redissink.ConfigFromURL(raw)
	if err != nil {
		return nil, nil //nolint:nilerr // openSink reports a bad URL
	}
	var client redis.UniversalClient
	t := &destinations{what: "Redis stream", router: cfg.Router,
		missing: func(ctx context.Context, keys []string) ([]string, error) {
			pipe := client.Pipeline()
			cmds := make([]*redis.IntCmd, len(keys))
			for i, k := range keys {
				cmds[i] = pipe.Exists(ctx, k)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return nil, err
			}
			var missing []string
			for i, k := range keys {
				if cmds[i].Val() == 0 {
					missing = append(missing, k)
				}
			}
			return missing, nil
		},
		remove: func(ctx context.Context, keys []string) error {
			for chunk := range slices.Chunk(keys, 1000) {
				if err := client.Del(ctx, chunk...).Err(); err != nil {
					return err
				}
			}
			return nil
		},
	}
	return t.cleanup(func(s outbox.Sink) bool {
		rs, ok := s.(*redissink.Sink)
		if ok {
			client = rs.Client()
		}
		return ok
	}), nil
}

// kafkaCleanup deletes the topics the bench's events went to that did not
// exist before, when the URL lets a produce create them
// (auto_create_topics): each topic is looked up the first time an event
// goes to it, before the sink's produce creates it.
func kafkaCleanup(raw string) (*brokerCleanup, error) {
	cfg, err := kafkasink.ConfigFromURL(raw)
	if err != nil || !cfg.AutoCreateTopics {
		return nil, nil //nolint:nilerr // openSink reports a bad URL
	}
	// A client of its own with the sink's connection settings; its
	// metadata requests never create a topic.
	cfg.AutoCreateTopics = false
	cfg.Logger = slog.New(slog.DiscardHandler) // the sink logs the brokers' trouble
	var client *kgo.Client
	t := &destinations{what: "Kafka topic", router: cfg.Router,
		missing: func(ctx context.Context, topics []string) ([]string, error) {
			req := kmsg.NewPtrMetadataRequest()
			req.AllowAutoTopicCreation = false
			for _, name := range topics {
				rt := kmsg.NewMetadataRequestTopic()
				rt.Topic = kmsg.StringPtr(name)
				req.Topics = append(req.Topics, rt)
			}
			resp, err := req.RequestWith(ctx, client)
			if err != nil {
				return nil, err
			}
			var missing []string
			for _, rt := range resp.Topics {
				if rt.Topic != nil && rt.ErrorCode == kerr.UnknownTopicOrPartition.Code {
					missing = append(missing, *rt.Topic)
				}
			}
			return missing, nil
		},
		remove: func(ctx context.Context, topics []string) error {
			req := kmsg.NewPtrDeleteTopicsRequest()
			req.TimeoutMillis = int32(benchCleanupTimeout.Milliseconds())
			req.TopicNames = topics
			for _, name := range topics {
				rt := kmsg.NewDeleteTopicsRequestTopic()
				rt.Topic = kmsg.StringPtr(name)
				req.Topics = append(req.Topics, rt)
			}
			resp, err := req.RequestWith(ctx, client)
			if err != nil {
				return err
			}
			for _, rt := range resp.Topics {
				if err := kerr.ErrorForCode(rt.ErrorCode); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
					var name string
					if rt.Topic != nil {
						name = *rt.Topic
					}
					return fmt.Errorf("topic %q: %w", name, err)
				}
			}
			return nil
		},
	}
	c := t.cleanup(func(s outbox.Sink) bool {
		if _, ok := s.(*kafkasink.Sink); !ok {
			return false
		}
		opts, err := kafkasink.ConnectOptions(cfg)
		if err == nil {
			client, err = kgo.NewClient(opts...)
		}
		if err != nil {
			t.fail(err)
			return false
		}
		return true
	})
	remove := c.remove
	c.remove = func(ctx context.Context) ([]string, error) {
		if client == nil {
			return nil, t.err
		}
		defer client.Close()
		return remove(ctx)
	}
	return c, nil
}

// destinations is a sink that passes events on after noting which of
// their destinations (stream keys, topics) did not exist before, so that
// remove deletes only those.
type destinations struct {
	what    string // such as "Redis stream"
	inner   outbox.Sink
	router  *route.Router
	missing func(ctx context.Context, names []string) ([]string, error)
	remove  func(ctx context.Context, names []string) error

	mu      sync.Mutex
	seen    map[string]bool
	created []string // destinations missing when first seen
	err     error    // the first failed lookup
}

// cleanup is the brokerCleanup of t; attach takes the opened sink and
// reports whether it is the sink t expects.
func (t *destinations) cleanup(attach func(outbox.Sink) bool) *brokerCleanup {
	if t.router == nil {
		t.router, _ = route.New("") // the sinks' default; always parses
	}
	t.seen = map[string]bool{}
	return &brokerCleanup{
		wrap: func(s outbox.Sink) outbox.Sink {
			if !attach(s) {
				return s
			}
			t.inner = s
			return t
		},
		remove: t.removeCreated,
	}
}

func (t *destinations) Publish(ctx context.Context, events []outbox.Event) []error {
	t.note(ctx, events)
	return t.inner.Publish(ctx, events)
}

// note looks up the destinations of events not seen before. It holds the
// lock through the lookup, so no other batch creates one of them before
// it: one round trip per batch with new destinations (with a route per
// aggregate, every batch).
func (t *destinations) note(ctx context.Context, events []outbox.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var fresh []string
	for i := range events {
		if name := t.router.Route(&events[i]); !t.seen[name] {
			t.seen[name] = true
			fresh = append(fresh, name)
		}
	}
	if len(fresh) == 0 {
		return
	}
	missing, err := t.missing(ctx, fresh)
	if err != nil {
		if t.err == nil {
			t.err = err
		}
		return
	}
	t.created = append(t.created, missing...)
}

// fail records err as a failed lookup.
func (t *destinations) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = err
	}
}

// removeCreated deletes the destinations that were missing.
func (t *destinations) removeCreated(ctx context.Context) ([]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var removed []string
	if t.inner != nil && len(t.created) > 0 {
		if err := t.remove(ctx, t.created); err != nil {
			return nil, fmt.Errorf("delete %ss: %w", t.what, err)
		}
		for _, name := range t.created {
			removed = append(removed, t.what+" "+name)
		}
	}
	if t.err != nil {
		return removed, fmt.Errorf("some %ss could not be looked up, so they stay: %w", t.what, t.err)
	}
	return removed, nil
}

// run removes what c names, bounded by benchCleanupTimeout also after an
// interrupt, and says on stderr what it removed or could not.
func (a *app) runBenchCleanup(ctx context.Context, c *brokerCleanup) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), benchCleanupTimeout)
	defer cancel()
	removed, err := c.remove(ctx)
	if len(removed) > 0 {
		notef(a.stderr, "outbox bench: removed what the bench created: %s (--keep leaves it)\n", describeRemoved(removed))
	}
	if err != nil {
		notef(a.stderr, "outbox bench: could not remove what the bench created on the broker: %s; remove it by hand\n", a.redact.String(err.Error()))
	}
}

// describeRemoved shortens a list of removed things for one line.
func describeRemoved(removed []string) string {
	if len(removed) <= 3 {
		return strings.Join(removed, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(removed[:3], ", "), len(removed)-3)
}
