package mqttsink_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/mqttsink"
	"github.com/outboxkit/outbox/sinktest"
)

// under routes every event to prefix/<event type>.
func under(t *testing.T, prefix string) *route.Router {
	r, err := route.New(prefix + "/{event_type}")
	require.NoError(t, err)
	return r
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(t *testing.T) sinktest.Harness {
		prefix := uniqueTopic(t)
		sub := subscribe(t, prefix+"/#")
		fail := tcpproxy.Start(t, broker.Addr(t))
		s := newSink(t, mqttsink.Config{URL: broker.URLVia(t, fail.Addr()), Router: under(t, prefix), ReconnectWait: 200 * time.Millisecond})
		return sinktest.Harness{
			Sink:      s,
			Delivered: sinktest.DeliveriesOf(sub.received),
			Stall:     func(*testing.T) (<-chan struct{}, func()) { return fail.Stall() },
			Fail:      func(*testing.T) { fail.Refuse() },
			Unreachable: func(*testing.T) outbox.Sink {
				fail.Refuse()
				return s
			},
			// MQTT 3.1.1 has no way for a broker to refuse one publish;
			// a topic with a wildcard fails in the sink, before sending.
			Reject: func(_ *testing.T, e *outbox.Event) {
				e.Headers = maps.Clone(e.Headers)
				e.Headers[route.Header] = prefix + "/orders/+"
			},
		}
	})
}

func TestMessageIsCloudEventsStructuredJSON(t *testing.T) {
	t.Parallel()
	prefix := uniqueTopic(t)
	sub := subscribe(t, prefix+"/#")
	s := newSink(t, mqttsink.Config{Router: under(t, prefix), Source: "urn:shop"})
	e := brokertest.FullEvent(4711, "X-Tenant", `a "quoted" <value>`)
	e.Payload = json.RawMessage(`{"total": 12.50, "items":[1,2], "html":"<b>"}`)
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))
	testutil.WaitFor(t, 5*time.Second, "the message", func() bool { return len(sub.messages()) == 1 })
	m := sub.messages()[0]
	require.Equal(t, prefix+"/order.created", m.Topic)
	require.True(t, json.Valid(m.Raw), "%s", m.Raw)
	require.Equal(t, `{"specversion":"1.0","id":"4711","type":"order.created","source":"urn:shop","subject":"o-42",`+
		`"time":"2024-05-06T05:08:09.123456789Z","datacontenttype":"application/json","aggregatetype":"order",`+
		`"xtenant":"a \"quoted\" \u003cvalue\u003e","causationid":"cause-1","correlationid":"corr-1","schemaversion":"2",`+
		`"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"vendor=abc",`+
		`"data":{"total": 12.50, "items":[1,2], "html":"<b>"}}`, string(m.Raw))
}

func TestInvalidJSONPayloadTravelsAsBase64(t *testing.T) {
	t.Parallel()
	prefix := uniqueTopic(t)
	sub := subscribe(t, prefix+"/#")
	s := newSink(t, mqttsink.Config{Router: under(t, prefix)})
	e := sinktest.NewEvent("x", "not json \x00\xff")
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))
	testutil.WaitFor(t, 5*time.Second, "the message", func() bool { return len(sub.messages()) == 1 })
	m := sub.messages()[0]
	require.NotContains(t, m.Event, "data")
	var b64 string
	require.NoError(t, json.Unmarshal(m.Event["data_base64"], &b64))
	data, err := base64.StdEncoding.DecodeString(b64)
	require.NoError(t, err)
	require.Equal(t, e.Payload, json.RawMessage(data))
}

func TestBadTopicsArePermanentAndDoNotFailTheBatch(t *testing.T) {
	t.Parallel()
	prefix := uniqueTopic(t)
	sub := subscribe(t, prefix+"/#")
	s := newSink(t, mqttsink.Config{Router: under(t, prefix)})
	withTopic := func(topic string) outbox.Event {
		e := sinktest.NewEvent("x", `{}`)
		e.Headers[route.Header] = topic
		return e
	}
	events := []outbox.Event{
		sinktest.NewEvent("good", `{"n":1}`),
		withTopic(prefix + "/+/x"),
		withTopic(prefix + "/#"),
		withTopic("$SYS/broker"),
		withTopic(prefix + "/\x00"),
		withTopic(prefix + "/" + strings.Repeat("x", 70000)),
		withTopic(prefix + "/\xff"),
		sinktest.NewEvent("good", `{"n":2}`),
	}
	errs := s.Publish(t.Context(), events)
	require.Len(t, errs, len(events))
	require.NoError(t, errs[0])
	require.NoError(t, errs[len(errs)-1])
	for i := 1; i < len(errs)-1; i++ {
		require.True(t, outbox.IsPermanent(errs[i]), "event %d: %v", i, errs[i])
		require.NotContains(t, errs[i].Error(), strings.Repeat("x", 100), "long topics are clipped in errors")
	}
	require.ErrorContains(t, errs[1], "holds a wildcard (+ or #)")
	require.ErrorContains(t, errs[3], "starts with $")
	testutil.WaitFor(t, 5*time.Second, "the good events", func() bool { return len(sub.messages()) == 2 })
}

func TestEmptyTopicIsPermanent(t *testing.T) {
	t.Parallel()
	brokertest.RequirePermanent(t, newSink(t, mqttsink.Config{Router: brokertest.EmptyRoute(t)}), "empty topic")
}

func TestNewFailsWhenBrokerUnreachable(t *testing.T) {
	t.Parallel()
	const pw = "s3cret-pw"
	_, err := mqttsink.New(t.Context(), mqttsink.Config{URL: "mqtt://user:" + pw + "@127.0.0.1:1", DialTimeout: 2 * time.Second})
	brokertest.RequireConnectError(t, err, pw, "mqttsink: connect to mqtt://127.0.0.1:1: ", "is the MQTT broker running and reachable?")
}

func TestNewHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := mqttsink.New(ctx, mqttsink.Config{URL: broker.URL()})
	require.ErrorIs(t, err, context.Canceled)
}

func TestReconnectsAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	prefix := uniqueTopic(t)
	sub := subscribe(t, prefix+"/#")
	p := tcpproxy.Start(t, broker.Addr(t))
	s := newSink(t, mqttsink.Config{URL: broker.URLVia(t, p.Addr()), Router: under(t, prefix), ReconnectWait: 5 * time.Second})
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("x", `{}`)}))
	accepted := p.Accepted()

	p.Cut()
	testutil.WaitFor(t, 10*time.Second, "a reconnect", func() bool { return p.Accepted() > accepted })
	var errs []error
	for range 3 {
		if errs = s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("x", `{}`)}); errs == nil {
			break
		}
		// A publish that raced the reconnect sees the old connection fail.
		require.False(t, outbox.IsPermanent(errs[0]))
	}
	require.Nil(t, errs)
	testutil.WaitFor(t, 5*time.Second, "both messages", func() bool { return len(sub.byID(t)) >= 2 })
}

func TestPublishAfterClose(t *testing.T) {
	t.Parallel()
	s, err := mqttsink.New(t.Context(), mqttsink.Config{URL: broker.URL()})
	require.NoError(t, err)
	require.ErrorContains(t, brokertest.PublishAfterClose(t, s), "sink is closed")
}

func TestLargeBatchLosesNothing(t *testing.T) {
	t.Parallel()
	prefix := uniqueTopic(t)
	sub := subscribe(t, prefix+"/#")
	s := newSink(t, mqttsink.Config{Router: under(t, prefix)})
	// Far beyond the local broker's default of 20 messages in flight per client.
	events := make([]outbox.Event, 1000)
	for i := range events {
		events[i] = sinktest.NewEvent("bulk", `{}`)
	}
	require.Nil(t, s.Publish(t.Context(), events))
	testutil.WaitFor(t, 10*time.Second, "every message", func() bool { return len(sub.byID(t)) == len(events) })
}
