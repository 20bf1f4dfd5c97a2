package mqttsink_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/mqttsink"
)

// BenchmarkPublish publishes batches of 1000 events (325-byte JSON
// payloads, as outbox bench's) with QoS 1 on one connection, and reports
// allocations per batch; with -cpuprofile it shows where the client's CPU
// per message goes:
//
//	go test ./sink/mqttsink -run '^$' -bench Publish -benchtime 50x -benchmem
func BenchmarkPublish(b *testing.B) {
	prefix := uniqueTopic(b)
	r, err := route.New(prefix + "/{event_type}")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	s, err := mqttsink.New(ctx, mqttsink.Config{URL: broker.URL(), Router: r, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatalf("the MQTT broker is not reachable at %s: %v", broker.URL(), err)
	}
	b.Cleanup(func() { _ = s.Close() })
	events := benchEvents(1000)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for _, err := range s.Publish(ctx, events) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*len(events))/b.Elapsed().Seconds(), "events/s")
}

// benchEvents returns n events shaped as outbox bench's drain hands them
// to a sink.
func benchEvents(n int) []outbox.Event {
	payload := []byte(`{"order_id":"00000000-0000-0000-0000-000000000000","customer":"bench","items":[` +
		`{"sku":"A-1","qty":1,"price":"10.00"},{"sku":"B-2","qty":2,"price":"20.00"},{"sku":"C-3","qty":3,"price":"30.00"}],` +
		`"note":"padding padding padding padding padding padding padding padding padding padding padding padding padding"}`)
	now := time.Now()
	events := make([]outbox.Event, n)
	for i := range events {
		id := int64(i + 1)
		events[i] = outbox.Event{ID: id, EventType: "order.created", AggregateType: "order", AggregateID: strconv.FormatInt(id, 10),
			Payload: payload, Status: outbox.StatusProcessing, AvailableAt: now, CreatedAt: now, UpdatedAt: now}
	}
	return events
}
