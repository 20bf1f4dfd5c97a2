package mqttsink_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/mqttsink"
	"github.com/outboxkit/outbox/sinktest"
)

// received maps what s got: each message is a CloudEvents JSON document
// whose string members are the attributes and whose data is the payload.
func (s *subscriber) received(*testing.T) []sinktest.Received {
	var rs []sinktest.Received
	for _, m := range s.messages() {
		r := sinktest.Received{Attributes: map[string]string{}, Payload: m.Event[mqttsink.MemberData], Message: m}
		for name, v := range m.Event {
			var str string
			if name != mqttsink.MemberData && json.Unmarshal(v, &str) == nil {
				r.Attributes[name] = str
			}
		}
		rs = append(rs, r)
	}
	return rs
}

// relayHarness reads back what s got.
func (s *subscriber) relayHarness(sink outbox.Sink) sinktest.RelayHarness {
	return sinktest.RelayHarness{Sink: sink, Received: s.received, ErrorText: "mqttsink"}
}

func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	prefix := uniqueTopic(t)
	sub := subscribe(t, prefix+"/#")
	r, err := route.New(prefix + "/{aggregate_type}/{event_type}")
	require.NoError(t, err)
	h := sub.relayHarness(newSink(t, mqttsink.Config{Router: r, Source: "urn:test"}))
	h.Source = "urn:test"
	h.Check = func(t *testing.T, _ outbox.Event, got sinktest.Received) {
		require.Equal(t, prefix+"/order/order.created", got.Message.(received).Topic)
	}
	sinktest.RelayEndToEnd(t, h)
}

func TestRelayLosesNothingWhileBrokerIsDown(t *testing.T) {
	t.Parallel()
	prefix := uniqueTopic(t)
	sub := subscribe(t, prefix+"/#")
	p := tcpproxy.Start(t, broker.Addr(t))
	h := sub.relayHarness(newSink(t, mqttsink.Config{URL: broker.URLVia(t, p.Addr()), Router: under(t, prefix), ReconnectWait: 100 * time.Millisecond}))
	h.Faults = p
	h.ReconnectsIdle = true // the sink's supervisor redials at once
	sinktest.RelayBrokerDown(t, h)
}

func TestRelayDeadLettersPoisonWithoutBlockingOthers(t *testing.T) {
	t.Parallel()
	prefix := uniqueTopic(t)
	sub := subscribe(t, prefix+"/#")
	sinktest.RelayPoison(t, sub.relayHarness(newSink(t, mqttsink.Config{Router: under(t, prefix)})),
		sinktest.Poison{
			Message: outbox.Message{EventType: "order.created", Headers: map[string]string{route.Header: prefix + "/orders/+"}, Payload: map[string]int{}},
			Error:   "holds a wildcard",
		},
	)
}
