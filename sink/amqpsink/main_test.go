package amqpsink_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/sink/amqpsink"
	"github.com/outboxkit/outbox/sinktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The shared test pool lives for the whole test binary.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/jackc/puddle/v2.(*Pool[...]).createIdleResources"),
	)
}

// brokerURLDefault is the local RabbitMQ.
const brokerURLDefault = "amqp://guest:guest@127.0.0.1:5672/"

// brokerURL is TEST_AMQP_URL, or brokerURLDefault.
func brokerURL() string {
	if u := os.Getenv("TEST_AMQP_URL"); u != "" {
		return u
	}
	return brokerURLDefault
}

// brokerAddr is the broker's host:port.
func brokerAddr(t testing.TB) string {
	u, err := url.Parse(brokerURL())
	require.NoError(t, err)
	if u.Port() == "" {
		return u.Hostname() + ":5672"
	}
	return u.Host
}

// urlVia is the broker URL with its host replaced by addr (a proxy).
func urlVia(t testing.TB, addr string) string {
	u, err := url.Parse(brokerURL())
	require.NoError(t, err)
	u.Host = addr
	return u.String()
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// uniqueName is a broker object name unique to this test run.
func uniqueName(t testing.TB) string {
	base := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "-")
	if len(base) > 60 {
		base = base[:60]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "outbox-test." + base + "." + hex.EncodeToString(b[:])
}

// admin is a test's own connection to the broker for declaring and
// consuming.
type admin struct {
	conn *amqp.Connection
	ch   *amqp.Channel
}

func newAdmin(t *testing.T) *admin {
	t.Helper()
	conn, err := amqp.Dial(brokerURL())
	if err != nil {
		t.Fatalf("RabbitMQ is not reachable at TEST_AMQP_URL (default %s): %v; start it (see DEVELOPERS.md) or set TEST_AMQP_URL", brokerURLDefault, err)
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
	conn, err := amqp.Dial(brokerURL())
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

// deliveries maps the messages for sinktest.
func (c *consumer) deliveries(t *testing.T) []sinktest.Delivery {
	var ds []sinktest.Delivery
	for _, m := range c.messages() {
		id, err := strconv.ParseInt(m.MessageId, 10, 64)
		require.NoError(t, err, "message-id %q", m.MessageId)
		typ, _ := m.Headers["cloudEvents_type"].(string)
		ds = append(ds, sinktest.Delivery{ID: id, EventType: typ, Payload: m.Body})
	}
	return ds
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
		cfg.URL = brokerURL()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := amqpsink.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}
