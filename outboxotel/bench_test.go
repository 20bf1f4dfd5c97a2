package outboxotel_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxotel"
	"github.com/outboxkit/outbox/route"
)

func benchEvent() *outbox.Event {
	return &outbox.Event{ID: 12345, EventType: "order.created", AggregateType: "order", AggregateID: "42",
		Payload: []byte(`{"order":42}`), Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
}

// BenchmarkOnPublish compares a relay without a tracer provider (the global
// no-op) with one that records every span.
func BenchmarkOnPublish(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	for _, bc := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"noop", nil}, {"recording", tp}} {
		b.Run(bc.name, func(b *testing.B) {
			// The default route, as a Kafka sink renders it per event.
			router, err := route.New("")
			if err != nil {
				b.Fatal(err)
			}
			tracing := outboxotel.New(outboxotel.Config{TracerProvider: bc.tp, System: outboxotel.SystemKafka, Router: router})
			ctx := context.Background()
			e := benchEvent()
			stored := e.Headers
			b.ReportAllocs()
			for b.Loop() {
				e.Headers = stored // as the relay hands each publish a fresh event
				if done := tracing.OnPublish(ctx, e); done != nil {
					done(nil)
				}
			}
		})
	}
}

// BenchmarkHeadersFromContext compares a write from an untraced request
// with one from a traced request.
func BenchmarkHeadersFromContext(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	traced, span := tp.Tracer("bench").Start(context.Background(), "request")
	defer span.End()
	tracing := outboxotel.New(outboxotel.Config{})
	for name, ctx := range map[string]context.Context{"untraced": context.Background(), "traced": traced} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = tracing.HeadersFromContext(ctx)
			}
		})
	}
}
