package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/route"
)

func TestSinkTracingTarget(t *testing.T) {
	t.Parallel()
	flagRouter, err := route.New("flag.{event_type}")
	require.NoError(t, err)
	e := &outbox.Event{ID: 1, EventType: "order_created", AggregateType: "order"}
	for _, tc := range []struct {
		raw         string
		flagRouter  *route.Router
		system      string
		destination string
		routed      string // the router's destination for e; "" for no router
	}{
		{raw: "stdout:"},
		{raw: "https://hooks.example.com/outbox"},
		{raw: "http://127.0.0.1:9/outbox"},
		{raw: "nats://127.0.0.1:4222", system: "nats", routed: "order.order_created"},
		{raw: "nats://127.0.0.1:4222?route=orders.{event_type}", system: "nats", routed: "orders.order_created"},
		{raw: "nats://127.0.0.1:4222", flagRouter: flagRouter, system: "nats", routed: "flag.order_created"},
		{raw: "kafka://127.0.0.1:9092?route={aggregate_type}", system: "kafka", routed: "order"},
		{raw: "amqp://guest:guest@127.0.0.1:5672/?exchange=events", system: "rabbitmq", destination: "events", routed: "order.order_created"},
		{raw: "amqps://127.0.0.1:5671/", system: "rabbitmq", routed: "order.order_created"},
		{raw: "redis://127.0.0.1:6379", system: "redis", routed: "order.order_created"},
		{raw: "mqtts://127.0.0.1:8883?route=t/{event_type}", system: "mqtt", routed: "t/order_created"},
	} {
		got := sinkTracingTarget(tc.raw, tc.flagRouter)
		require.Equal(t, tc.system, got.system, tc.raw)
		require.Equal(t, tc.destination, got.destination, tc.raw)
		if tc.routed == "" {
			require.Nil(t, got.router, tc.raw)
			continue
		}
		require.NotNil(t, got.router, tc.raw)
		require.Equal(t, tc.routed, got.router.Route(e), tc.raw)
	}
}
