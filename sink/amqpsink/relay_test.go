package amqpsink_test

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/amqpsink"
	"github.com/outboxkit/outbox/sinktest"
)

// relayHarness reads back what c's queue got.
func (c *consumer) relayHarness(s outbox.Sink) sinktest.RelayHarness {
	return sinktest.RelayHarness{Sink: s, Received: c.received, ErrorText: "amqpsink"}
}

// received maps the messages for the relay scenarios: the CloudEvents
// attributes are the prefixed headers and the content-type property.
func (c *consumer) received(*testing.T) []sinktest.Received {
	var rs []sinktest.Received
	for _, m := range c.messages() {
		attrs := map[string]string{"datacontenttype": m.ContentType}
		for name, v := range m.Headers {
			s, _ := v.(string)
			switch {
			case strings.HasPrefix(name, amqpsink.PropertyPrefixDefault):
				attrs[strings.TrimPrefix(name, amqpsink.PropertyPrefixDefault)] = s
			case name == "traceparent" || name == "tracestate":
				attrs[name] = s
			}
		}
		rs = append(rs, sinktest.Received{Attributes: attrs, Payload: m.Body, Message: m})
	}
	return rs
}

func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	exchange := a.exchange(t)
	c := a.consume(t, exchange, "order.#")
	h := c.relayHarness(newSink(t, amqpsink.Config{Exchange: exchange, Source: "urn:test"}))
	h.Source = "urn:test"
	h.Check = func(t *testing.T, _ outbox.Event, got sinktest.Received) {
		m := got.Message.(amqp.Delivery)
		require.Equal(t, "order.order.created", m.RoutingKey)
		require.Equal(t, got.Attributes["id"], m.MessageId, "message-id is the event ID")
	}
	sinktest.RelayEndToEnd(t, h)
}

func TestRelayLosesNothingWhileBrokerIsDown(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	exchange := a.exchange(t)
	c := a.consume(t, exchange, "#")
	p := tcpproxy.Start(t, broker.Addr(t))
	h := c.relayHarness(newSink(t, amqpsink.Config{URL: broker.URLVia(t, p.Addr()), Exchange: exchange, ReconnectWait: 100 * time.Millisecond}))
	h.Faults = p
	h.ReconnectsIdle = true // the sink's supervisor redials at once
	sinktest.RelayBrokerDown(t, h)
}

func TestRelayDeadLettersPoisonWithoutBlockingOthers(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	exchange := a.exchange(t)
	c := a.consume(t, exchange, "order.#")
	sinktest.RelayPoison(t, c.relayHarness(newSink(t, amqpsink.Config{Exchange: exchange, UnroutablePermanent: true})),
		sinktest.Poison{
			Message: outbox.Message{EventType: "order.created", Headers: map[string]string{route.Header: strings.Repeat("x", 300)}, Payload: map[string]int{}},
			Error:   "longer than the 255 AMQP allows",
		},
		sinktest.Poison{
			Message: outbox.Message{EventType: "order.created", AggregateType: "nobody", Payload: map[string]int{}},
			Error:   `no queue for routing key "nobody.order.created"`,
		},
	)
}
