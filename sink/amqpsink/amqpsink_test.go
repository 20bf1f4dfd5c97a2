package amqpsink_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/amqpsink"
	"github.com/outboxkit/outbox/sinktest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(t *testing.T) sinktest.Harness {
		a := newAdmin(t)
		exchange := a.exchange(t)
		c := a.consume(t, exchange, "#")
		fail := tcpproxy.Start(t, broker.Addr(t))
		s := newSink(t, amqpsink.Config{URL: broker.URLVia(t, fail.Addr()), Exchange: exchange, ReconnectWait: 200 * time.Millisecond})
		return sinktest.Harness{
			Sink:      s,
			Delivered: sinktest.DeliveriesOf(c.received),
			Stall:     func(*testing.T) (<-chan struct{}, func()) { return fail.Stall() },
			Fail:      func(*testing.T) { fail.Refuse() },
			Unreachable: func(*testing.T) outbox.Sink {
				fail.Refuse()
				return s
			},
			// Routed where no queue is bound: the broker returns that
			// message and routes the ones behind it.
			Reject: func(t *testing.T, e *outbox.Event) {
				require.NoError(t, a.ch.QueueBind(exchange, "order.#", exchange, false, nil))
				require.NoError(t, a.ch.QueueUnbind(exchange, "#", exchange, nil))
				e.Headers = maps.Clone(e.Headers)
				e.Headers[route.Header] = "nobody.order.created"
			},
		}
	})
}

func TestMessageCarriesCloudEventsBinaryMode(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{amqpsink.PrefixUnderscore, amqpsink.PrefixColon} {
		t.Run(prefix, func(t *testing.T) {
			t.Parallel()
			a := newAdmin(t)
			exchange := a.exchange(t)
			c := a.consume(t, exchange, "order.#")
			s := newSink(t, amqpsink.Config{Exchange: exchange, PropertyPrefix: prefix, Source: "urn:shop"})
			e := brokertest.FullEvent(4711, "X-Tenant", "acme")
			require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))
			testutil.WaitFor(t, 5*time.Second, "the message", func() bool { return len(c.messages()) == 1 })

			m := c.messages()[0]
			require.Equal(t, exchange, m.Exchange)
			require.Equal(t, "order.order.created", m.RoutingKey, "the default route is {aggregate_type}.{event_type}")
			require.Equal(t, string(e.Payload), string(m.Body), "the body is the payload exactly as stored")
			require.Equal(t, "application/json", m.ContentType)
			require.Equal(t, amqp.Persistent, m.DeliveryMode)
			require.Equal(t, "4711", m.MessageId)
			require.Equal(t, "order.created", m.Type)
			require.Equal(t, "corr-1", m.CorrelationId)
			require.Equal(t, time.Date(2024, 5, 6, 5, 8, 9, 0, time.UTC), m.Timestamp.UTC(), "AMQP timestamps have seconds")
			want := amqp.Table{
				prefix + "specversion":   "1.0",
				prefix + "id":            "4711",
				prefix + "type":          "order.created",
				prefix + "source":        "urn:shop",
				prefix + "subject":       "o-42",
				prefix + "time":          "2024-05-06T05:08:09.123456789Z",
				prefix + "aggregatetype": "order",
				prefix + "correlationid": "corr-1",
				prefix + "causationid":   "cause-1",
				prefix + "schemaversion": "2",
				prefix + "xtenant":       "acme",
				"traceparent":            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				"tracestate":             "vendor=abc",
			}
			require.Equal(t, want, m.Headers, "datacontenttype travels as content-type only")
		})
	}
}

func TestDefaultExchangeRoutesToQueueByName(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	queue := uniqueName(t)
	c := a.consume(t, "", queue)
	router, err := route.New("{header.queue}")
	require.NoError(t, err)
	s := newSink(t, amqpsink.Config{Router: router})
	e := sinktest.NewEvent("order.created", `{"n":1}`)
	e.Headers["queue"] = queue
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))
	testutil.WaitFor(t, 5*time.Second, "the message", func() bool { return len(c.messages()) == 1 })
	require.Equal(t, queue, c.messages()[0].RoutingKey)
}

func TestPermanentErrorsDoNotFailTheBatch(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	exchange := a.exchange(t)
	c := a.consume(t, exchange, "#")
	s := newSink(t, amqpsink.Config{Exchange: exchange})

	good1 := sinktest.NewEvent("a.created", `{"n":1}`)
	longKey := sinktest.NewEvent("a.created", `{"n":2}`)
	longKey.Headers[route.Header] = strings.Repeat("k", 256)
	longType := sinktest.NewEvent(strings.Repeat("t", 256), `{"n":3}`)
	longType.Headers[route.Header] = "ok"
	good2 := sinktest.NewEvent("a.created", `{"n":4}`)

	errs := s.Publish(t.Context(), []outbox.Event{good1, longKey, longType, good2})
	require.Len(t, errs, 4)
	require.NoError(t, errs[0])
	require.True(t, outbox.IsPermanent(errs[1]), "a routing key over 255 bytes: %v", errs[1])
	require.ErrorContains(t, errs[1], "longer than the 255 AMQP allows")
	require.True(t, outbox.IsPermanent(errs[2]), "an event type over 255 bytes: %v", errs[2])
	require.NoError(t, errs[3])
	testutil.WaitFor(t, 5*time.Second, "the good events", func() bool { return len(c.messages()) == 2 })
}

func TestEmptyRoutingKeyOnDefaultExchangeIsPermanent(t *testing.T) {
	t.Parallel()
	brokertest.RequirePermanent(t, newSink(t, amqpsink.Config{Router: brokertest.EmptyRoute(t)}), "routing key is empty")
}

func TestUnroutable(t *testing.T) {
	t.Parallel()
	for _, permanent := range []bool{false, true} {
		name := "Retryable"
		if permanent {
			name = "Permanent"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := newAdmin(t)
			exchange := a.exchange(t)
			c := a.consume(t, exchange, "bound.#")
			s := newSink(t, amqpsink.Config{Exchange: exchange, UnroutablePermanent: permanent})
			bound := sinktest.NewEvent("created", `{}`)
			bound.AggregateType = "bound"
			unbound := sinktest.NewEvent("created", `{}`)
			unbound.AggregateType = "nobody"

			errs := s.Publish(t.Context(), []outbox.Event{unbound, bound, unbound})
			require.Len(t, errs, 3)
			require.NoError(t, errs[1])
			for _, i := range []int{0, 2} {
				var re *amqpsink.ReturnError
				require.ErrorAs(t, errs[i], &re)
				require.Equal(t, unbound.ID, re.EventID)
				require.Equal(t, "nobody.created", re.RoutingKey)
				require.Equal(t, exchange, re.Exchange)
				require.Equal(t, amqp.NoRoute, re.Code)
				require.Equal(t, permanent, outbox.IsPermanent(errs[i]))
				require.ErrorContains(t, errs[i], `has no queue for routing key "nobody.created"; bind a queue`)
			}
			testutil.WaitFor(t, 5*time.Second, "the routable event", func() bool { return len(c.messages()) == 1 })

			// The channel is reused; a later batch sees none of these returns.
			require.Nil(t, s.Publish(t.Context(), []outbox.Event{bound}))
		})
	}
}

func TestMissingExchangeIsRetryableAndNamed(t *testing.T) {
	t.Parallel()
	name := uniqueName(t)
	s := newSink(t, amqpsink.Config{Exchange: name})
	errs := s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("x", `{}`), sinktest.NewEvent("x", `{}`)})
	require.Len(t, errs, 2)
	for _, err := range errs {
		require.Error(t, err)
		require.False(t, outbox.IsPermanent(err))
		require.ErrorContains(t, err, `exchange "`+name+`" does not exist`)
	}

	// Declaring it makes the retry work on a fresh channel.
	a := newAdmin(t)
	require.NoError(t, a.ch.ExchangeDeclare(name, "fanout", false, true, false, false, nil))
	c := a.consume(t, name, "")
	e := sinktest.NewEvent("x", `{}`)
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))
	testutil.WaitFor(t, 5*time.Second, "the message", func() bool { return len(c.messages()) == 1 })
}

func TestDeclareExchange(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	t.Cleanup(func() { _ = a.ch.ExchangeDelete(name, false, false) })
	newSink(t, amqpsink.Config{Exchange: name, DeclareExchange: true, ExchangeType: "direct"})
	// Declared durable and direct: a passive declare with those settings
	// succeeds.
	require.NoError(t, a.ch.ExchangeDeclarePassive(name, "direct", true, false, false, false, nil))

	// A declare that conflicts with the existing exchange fails New.
	_, err := amqpsink.New(t.Context(), amqpsink.Config{URL: broker.URL(), Exchange: name, DeclareExchange: true, ExchangeType: "fanout"})
	require.ErrorContains(t, err, "exists with other settings")
}

func TestManyEventsSpanConfirmWindows(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	exchange := a.exchange(t)
	c := a.consume(t, exchange, "#")
	s := newSink(t, amqpsink.Config{Exchange: exchange})
	events := make([]outbox.Event, 2500)
	for i := range events {
		events[i] = sinktest.NewEvent("bulk.created", `{}`)
	}
	require.Nil(t, s.Publish(t.Context(), events))
	testutil.WaitFor(t, 10*time.Second, "every message", func() bool { return len(c.byID()) == len(events) })
}

func TestNewFailsWhenBrokerUnreachable(t *testing.T) {
	t.Parallel()
	p := tcpproxy.Start(t, broker.Addr(t))
	p.Refuse()
	const pw = "s3cret-pw"
	start := time.Now()
	_, err := amqpsink.New(t.Context(), amqpsink.Config{URL: "amqp://guest:" + pw + "@" + p.Addr() + "/", DialTimeout: 2 * time.Second})
	brokertest.RequireConnectError(t, err, pw, "amqpsink: connect to amqp://"+p.Addr()+"/")
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestNewFailsOnBadCredentials(t *testing.T) {
	t.Parallel()
	const pw = "wrong-password-x"
	_, err := amqpsink.New(t.Context(), amqpsink.Config{URL: "amqp://guest:" + pw + "@" + broker.Addr(t) + "/"})
	brokertest.RequireConnectError(t, err, pw, "check the user and password")
}

func TestNewHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := amqpsink.New(ctx, amqpsink.Config{URL: broker.URL()})
	require.ErrorIs(t, err, context.Canceled)
}

func TestReconnectsAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	exchange := a.exchange(t)
	c := a.consume(t, exchange, "#")
	p := tcpproxy.Start(t, broker.Addr(t))
	s := newSink(t, amqpsink.Config{URL: broker.URLVia(t, p.Addr()), Exchange: exchange, ReconnectWait: 5 * time.Second})
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("x", `{}`)}))
	accepted := p.Accepted()

	p.Cut()
	// Publish waits for the reconnect instead of failing the batch.
	var errs []error
	for range 3 {
		if errs = s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("x", `{}`)}); errs == nil {
			break
		}
		// A publish that raced the cut sees the old connection fail.
		require.False(t, outbox.IsPermanent(errs[0]))
	}
	require.Nil(t, errs)
	require.Greater(t, p.Accepted(), accepted, "the sink reconnected")
	testutil.WaitFor(t, 5*time.Second, "both messages", func() bool { return len(c.byID()) >= 2 })
}

func TestPublishAfterClose(t *testing.T) {
	t.Parallel()
	s, err := amqpsink.New(t.Context(), amqpsink.Config{URL: broker.URL()})
	require.NoError(t, err)
	require.ErrorContains(t, brokertest.PublishAfterClose(t, s), "sink is closed")
}
