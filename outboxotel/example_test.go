package outboxotel_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxotel"
)

// Tracing an event from the request that wrote it to the sink. A real
// application installs its SDK provider with otel.SetTracerProvider and
// leaves Config.TracerProvider unset.
func Example() {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	tracing := outboxotel.New(outboxotel.Config{TracerProvider: tp, System: outboxotel.SystemNATS})

	// The writer stores the request's trace context with each event...
	writerCfg := outbox.WriterConfig{HeadersFromContext: tracing.HeadersFromContext}
	// ...and the relay traces each publish.
	relayCfg := outbox.RelayConfig{Hooks: []outbox.Hook{tracing}}
	_, _ = writerCfg, relayCfg

	// What the two do with one event:
	ctx, request := tp.Tracer("app").Start(context.Background(), "POST /orders")
	stored := tracing.HeadersFromContext(ctx)
	request.End()
	event := outbox.Event{ID: 1, EventType: "order.created", Headers: stored}
	done := tracing.OnPublish(context.Background(), &event)
	done(nil) // the sink's result

	fmt.Println("stored traceparent is the request's:", stored["traceparent"][3:35] == request.SpanContext().TraceID().String())
	fmt.Println("the sink gets the publish span's:", event.Headers["traceparent"] != stored["traceparent"])
	// Output:
	// stored traceparent is the request's: true
	// the sink gets the publish span's: true
}
