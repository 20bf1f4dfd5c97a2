package mqttsink_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/internal/testutil/relaytest"
	"github.com/outboxkit/outbox/sink/mqttsink"
)

func TestMain(m *testing.M) { relaytest.VerifyTestMain(m) }

// broker is the MQTT broker the tests use.
var broker = brokertest.Broker{Name: "the MQTT broker", Env: "TEST_MQTT_URL", Default: "mqtt://127.0.0.1:1883", Port: "1883"}

// uniqueTopic is a topic level unique to this test run.
func uniqueTopic(t testing.TB) string { return brokertest.UniqueName(t, "outbox-test/", "-") }

// received is one message a subscriber got, decoded.
type received struct {
	Topic string
	Raw   []byte
	Event map[string]json.RawMessage
}

func (r received) attr(t *testing.T, name string) string {
	t.Helper()
	var s string
	if v, ok := r.Event[name]; ok {
		require.NoError(t, json.Unmarshal(v, &s), "attribute %s", name)
	}
	return s
}

// subscriber collects every message on a topic filter.
type subscriber struct {
	mu   sync.Mutex
	msgs []received
}

// subscribe subscribes with QoS 1 to filter until the test ends.
func subscribe(t *testing.T, filter string) *subscriber {
	t.Helper()
	u, err := url.Parse(broker.URL())
	require.NoError(t, err)
	sub := &subscriber{}
	opts := mqtt.NewClientOptions().AddBroker("tcp://" + broker.Addr(t)).SetClientID("outbox-test-sub-" + hex.EncodeToString([]byte(filter))[:16] + strconv.FormatInt(time.Now().UnixNano(), 36)).
		SetCleanSession(true).SetAutoReconnect(false).SetOrderMatters(false)
	if u.User != nil {
		opts.SetUsername(u.User.Username())
		pw, _ := u.User.Password()
		opts.SetPassword(pw)
	}
	c := mqtt.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		broker.Unreachable(t, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	tok := c.Subscribe(filter, 1, func(_ mqtt.Client, m mqtt.Message) {
		r := received{Topic: m.Topic(), Raw: append([]byte(nil), m.Payload()...)}
		_ = json.Unmarshal(r.Raw, &r.Event)
		sub.mu.Lock()
		sub.msgs = append(sub.msgs, r)
		sub.mu.Unlock()
	})
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	return sub
}

func (s *subscriber) messages() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.msgs...)
}

// byID indexes the messages by their id attribute, keeping the first of
// duplicates.
func (s *subscriber) byID(t *testing.T) map[string]received {
	m := make(map[string]received)
	for _, r := range s.messages() {
		id := r.attr(t, "id")
		if _, ok := m[id]; !ok {
			m[id] = r
		}
	}
	return m
}

// newSink returns a connected sink closed when the test ends.
func newSink(t *testing.T, cfg mqttsink.Config) *mqttsink.Sink {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = broker.URL()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return brokertest.Open(t, func(ctx context.Context) (*mqttsink.Sink, error) { return mqttsink.New(ctx, cfg) })
}
