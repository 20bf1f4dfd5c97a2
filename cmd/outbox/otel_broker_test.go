package main_test

import (
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
)

// TestRelayOpenTelemetryRabbitMQ checks what `outbox relay --otel` names a
// RabbitMQ publish: messaging.system "rabbitmq" (not the URL's "amqp"), and
// a span "send {exchange}:{routing key}" with the routing key the sink's
// route renders for each event, including a --route-rule and the
// outbox_topic header.
func TestRelayOpenTelemetryRabbitMQ(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ch, exchange, q := rabbitExchange(t, "outbox-cli-otel-")
	u, err := url.Parse(amqpURL()) // the sink URL
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, "#", exchange, false, nil))

	b.write(t,
		outbox.Message{EventType: "order.created", AggregateType: "order", Payload: map[string]int{"n": 1}},
		outbox.Message{EventType: "user.deleted", AggregateType: "user", Payload: map[string]int{"n": 2}},
		outbox.Message{EventType: "order.paid", AggregateType: "order", Payload: map[string]int{"n": 3},
			Headers: map[string]string{"outbox_topic": "audit"}})
	c := newOTLPCollector(t)
	qs := u.Query()
	qs.Set("exchange", exchange)
	u.RawQuery = qs.Encode()
	p := start(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + c.URL, "OTEL_BSP_SCHEDULE_DELAY=50"},
		"--database-url", testutil.DatabaseURL(), "--schema", b.schema, "relay", "--sink", u.String(),
		"--route-rule", "user.*=users.{event_type}", "--poll-interval", "50ms")

	want := map[string]string{ // span name → routing key
		"send " + exchange + ":order.order.created": "order.order.created",
		"send " + exchange + ":users.user.deleted":  "users.user.deleted",
		"send " + exchange + ":audit":               "audit",
	}
	got := map[string]*tracepb.Span{}
	testutil.WaitFor(t, 30*time.Second, "the three publish spans at the collector", func() bool {
		require.False(t, p.exited(), "relay exited early; stderr:\n%s", p.stderr.String())
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, sp := range c.spans {
			got[sp.GetName()] = sp
		}
		return len(got) >= len(want)
	})
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), "stderr:\n%s", p.stderr.String())
	require.Len(t, got, len(want), "span names")
	for name, key := range want {
		sp := got[name]
		require.NotNil(t, sp, "no span %q among %v", name, got)
		attrs := map[string]string{}
		for _, kv := range sp.GetAttributes() {
			attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		require.Equal(t, "rabbitmq", attrs["messaging.system"], name)
		require.Equal(t, exchange+":"+key, attrs["messaging.destination.name"], name)
		require.Equal(t, key, attrs["messaging.rabbitmq.destination.routing_key"], name)
		require.Equal(t, "send", attrs["messaging.operation.name"], name)
	}
}
