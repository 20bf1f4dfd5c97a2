package amqpsink_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/internal/testutil/relaytest"
	"github.com/outboxkit/outbox/sink/amqpsink"
)

func TestMain(m *testing.M) { relaytest.VerifyTestMain(m) }

// broker is the RabbitMQ the tests use.
var broker = brokertest.Broker{Name: "RabbitMQ", Env: "TEST_AMQP_URL", Default: "amqp://guest:guest@127.0.0.1:5672/", Port: "5672"}

// uniqueName is a broker object name unique to this test run.
func uniqueName(t testing.TB) string { return brokertest.UniqueName(t, "outbox-test.", ".") }

// admin is a test's own connection to the broker for declaring and
// consuming.
type admin struct {
	conn *amqp.Connection
	ch   *amqp.Channel
}

func newAdmin(t *testing.T) *admin {
	t.Helper()
	conn, err := amqp.Dial(broker.URL())
	if err != nil {
		broker.Unreachable(t, err)
	}
	ch, err := conn.Channel()
	require.NoError(t, err)
	a := &admin{conn: conn, ch: ch}
	t.Cleanup(func() { _ = conn.Close() })
	return a
}

// exchange declares a topic exchange deleted when the test ends.
func (a *admin) exchange(t *testing.T) string {
	t.Helper()
	name := uniqueName(t)
	require.NoError(t, a.ch.ExchangeDeclare(name, "topic", false, false, false, false, nil))
	t.Cleanup(func() { _ = a.ch.ExchangeDelete(name, false, false) })
	return name
}

// consumer collects every message delivered to its queue.
type consumer struct {
	mu   sync.Mutex
	msgs []amqp.Delivery
}

// consume declares a queue named like the exchange, binds it with key
// (unless exchange is empty: then the queue is named key and gets the
// default exchange's messages) and collects its messages until the test
// ends.
func (a *admin) consume(t *testing.T, exchange, key string) *consumer {
	t.Helper()
	queue := exchange
	if exchange == "" {
		queue = key
	}
	_, err := a.ch.QueueDeclare(queue, false, false, false, false, nil)
	require.NoError(t, err)
	if exchange != "" {
		require.NoError(t, a.ch.QueueBind(queue, key, exchange, false, nil))
	}
	conn, err := amqp.Dial(broker.URL())
	require.NoError(t, err)
	ch, err := conn.Channel()
	require.NoError(t, err)
	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	require.NoError(t, err)
	c := &consumer{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for d := range deliveries {
			c.mu.Lock()
			c.msgs = append(c.msgs, d)
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = conn.Close()
		<-done
		_, _ = a.ch.QueueDelete(queue, false, false, false)
	})
	return c
}

// messages returns what the queue delivered so far.
func (c *consumer) messages() []amqp.Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]amqp.Delivery(nil), c.msgs...)
}

// byID indexes the messages by message-id, keeping the first of duplicates.
func (c *consumer) byID() map[string]amqp.Delivery {
	m := make(map[string]amqp.Delivery)
	for _, d := range c.messages() {
		if _, ok := m[d.MessageId]; !ok {
			m[d.MessageId] = d
		}
	}
	return m
}

// newSink returns a connected sink closed when the test ends.
func newSink(t *testing.T, cfg amqpsink.Config) *amqpsink.Sink {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = broker.URL()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return brokertest.Open(t, func(ctx context.Context) (*amqpsink.Sink, error) { return amqpsink.New(ctx, cfg) })
}
