// Package outboxotel carries OpenTelemetry traces through the outbox: the
// writer stores the caller's trace context (W3C traceparent and tracestate)
// in each event's headers, and the relay starts a producer span per publish
// that is linked to that context, then hands the sink the publish span's
// context in the headers, so the broker message carries it on to the
// consumer.
//
//	tracing := outboxotel.New(outboxotel.Config{System: outboxotel.SystemKafka, Router: router})
//	writer := outbox.NewWriter(outbox.WriterConfig{HeadersFromContext: tracing.HeadersFromContext})
//	relay, err := outbox.NewRelay(db, outbox.RelayConfig{Sink: sink, Hooks: []outbox.Hook{tracing}})
//
// # Linked, not parented
//
// A publish span starts a new trace linked to the writer's span rather than
// continuing the writer's trace. The request that wrote the event has
// usually ended long before the relay publishes it (retries can come hours
// later), and OpenTelemetry's messaging conventions link, rather than
// parent, work that a batch does for many traces. Trace viewers follow the
// link from the publish span back to the request. Set Config.ChildOfWriter
// for one trace per event from the request to the consumer instead.
//
// # Span names and destinations
//
// Publish spans follow the OpenTelemetry messaging conventions: the name is
// "{operation} {destination}", such as "send order.order_created", where
// the operation is "send" (messaging.operation.type and .name) and the
// destination is the topic, subject or stream the sink publishes the event
// to. Give Config.Router the sink's route.Router and each span names the
// destination the router renders for its event, as the sink does; a sink
// without destinations (webhook, stdout, handlers) leaves it out and the
// span is named "send". A route template with {aggregate_id} or {id} makes
// as many span names as events, which trace backends group poorly.
//
// # Cost without tracing
//
// Until an SDK tracer provider is installed (otel.SetTracerProvider, or
// Config.TracerProvider), the spans are no-ops: HeadersFromContext returns
// nil without allocating for a context without a span, and OnPublish costs
// one no-op Start call and leaves the headers alone. The benchmarks in this
// package measure both paths.
package outboxotel

import (
	"cmp"
	"context"
	"maps"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/route"
)

// TracerName is the instrumentation scope of the publish spans.
const TracerName = "github.com/outboxkit/outbox/outboxotel"

// Operation is the messaging.operation.name of publish spans and the first
// word of their names: the messaging conventions' operation type for a
// producer handing messages to a broker.
const Operation = "send"

// Values of Config.System. Kafka and RabbitMQ are values of the
// conventions' messaging.system registry; NATS, Redis and MQTT are not in it
// (the NATS conventions, still in development, name it "nats"), so they use
// the system's lower-case name, as the conventions allow.
const (
	SystemKafka    = "kafka"
	SystemRabbitMQ = "rabbitmq"
	SystemNATS     = "nats"
	SystemRedis    = "redis"
	SystemMQTT     = "mqtt"
)

// rabbitMQDefaultExchange names the destination of a message with neither an
// exchange nor a routing key, per the RabbitMQ conventions.
const rabbitMQDefaultExchange = "amq.default"

// Attribute keys outboxotel sets beside the messaging.* conventions.
const (
	AttrEventType     = attribute.Key("outbox.event.type")
	AttrAggregateType = attribute.Key("outbox.aggregate.type")
	AttrAggregateID   = attribute.Key("outbox.aggregate.id")
	// AttrAttempt is 1 for an event's first publish, 2 for its first retry.
	AttrAttempt = attribute.Key("outbox.attempt")
	// AttrTenant is the tenant schema the event came from (Event.Tenant),
	// set for relays of outbox.Tenants only.
	AttrTenant = attribute.Key("outbox.tenant")
	// AttrDatabase labels the database the event came from (Event.Database:
	// host:port/name), set when one process serves several.
	AttrDatabase = attribute.Key("outbox.database")
)

// Config configures Tracing. Every field is optional.
type Config struct {
	// TracerProvider creates the publish spans. Defaults to the global
	// provider (otel.GetTracerProvider), which is a no-op until an SDK
	// provider is installed with otel.SetTracerProvider.
	TracerProvider trace.TracerProvider
	// Propagator writes the trace context into event headers and reads it
	// back. Defaults to propagation.TraceContext: the W3C traceparent and
	// tracestate headers. Sinks carry the headers into the broker message.
	Propagator propagation.TextMapPropagator
	// System is the messaging.system attribute of publish spans: one of the
	// System constants, such as SystemKafka or SystemRabbitMQ (not "amqp").
	// Leave it unset for a sink that is not a messaging system (webhook,
	// stdout, handlers): the attribute is then omitted.
	System string
	// Router is the sink's router: each publish span's destination
	// (messaging.destination.name and the second word of its name) is the
	// topic, subject or stream key it renders for the span's event. For
	// SystemRabbitMQ it renders the routing key. Unset, Destination is used.
	Router *route.Router
	// Destination is the destination of every event when Router is unset,
	// for a sink that publishes to one topic, subject or queue. For
	// SystemRabbitMQ it is the exchange (empty for the default exchange),
	// and the destination is "exchange:routing key". Unset with Router
	// unset, spans have no destination and are named "send".
	Destination string
	// ChildOfWriter makes each publish span a child of the writer's span,
	// continuing its trace, instead of the root of a new trace linked to
	// it. See the package documentation.
	ChildOfWriter bool
}

// Tracing stores trace context with events and traces their publishing. Use
// HeadersFromContext as outbox.WriterConfig.HeadersFromContext and add the
// Tracing to outbox.RelayConfig.Hooks (it is an outbox.HookPublish). It is
// safe for concurrent use.
type Tracing struct {
	cfg    Config
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// New returns a Tracing configured by cfg.
func New(cfg Config) *Tracing {
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	prop := cfg.Propagator
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &Tracing{
		cfg:    cfg,
		tracer: tp.Tracer(TracerName, trace.WithSchemaURL(semconv.SchemaURL)),
		prop:   prop,
	}
}

// HeadersFromContext returns the trace context of ctx's span as event
// headers (traceparent, tracestate), or nil when ctx carries no span. It
// has the signature of outbox.WriterConfig.HeadersFromContext.
func (t *Tracing) HeadersFromContext(ctx context.Context) map[string]string {
	return headers(ctx, t.prop)
}

// WriterHeaders returns a function for outbox.WriterConfig.HeadersFromContext
// that stores the trace context of the writer's span in each event's
// headers with propagator (nil for W3C trace context), for an application
// that writes events but leaves the relay to another process.
func WriterHeaders(propagator propagation.TextMapPropagator) func(ctx context.Context) map[string]string {
	if propagator == nil {
		propagator = propagation.TraceContext{}
	}
	return func(ctx context.Context) map[string]string { return headers(ctx, propagator) }
}

func headers(ctx context.Context, p propagation.TextMapPropagator) map[string]string {
	// The common untraced case returns before allocating a carrier.
	if !trace.SpanContextFromContext(ctx).IsValid() && baggage.FromContext(ctx).Len() == 0 {
		return nil
	}
	h := propagation.MapCarrier{}
	p.Inject(ctx, h)
	if len(h) == 0 {
		return nil
	}
	return h
}

// OnPublish starts a producer span for the publish of e and replaces the
// trace context in e's headers with the span's, so the sink injects it into
// the broker message; the stored row keeps the writer's. The returned
// function records the publish result and ends the span. It implements
// outbox.HookPublish.
func (t *Tracing) OnPublish(ctx context.Context, e *outbox.Event) func(err error) {
	opts := linkedStart
	if t.cfg.ChildOfWriter {
		ctx = t.prop.Extract(ctx, propagation.MapCarrier(e.Headers))
		opts = childStart
	}
	// The name is set once the span records, so the no-op path does not
	// build it.
	spanCtx, span := t.tracer.Start(ctx, Operation, opts...)
	sc := span.SpanContext()
	if !sc.IsValid() {
		return nil // no tracer provider installed: nothing to trace or hand on
	}
	if span.IsRecording() {
		dest, key := t.destination(e)
		if dest != "" {
			span.SetName(Operation + " " + dest)
		}
		span.SetAttributes(t.attributes(e, dest, key)...)
		if !t.cfg.ChildOfWriter {
			stored := trace.SpanContextFromContext(t.prop.Extract(context.Background(), propagation.MapCarrier(e.Headers)))
			if stored.IsValid() {
				span.AddLink(trace.Link{SpanContext: stored})
			}
		}
	}
	e.Headers = t.replaceContext(spanCtx, e.Headers)
	return func(err error) {
		if err != nil {
			kind := "retryable"
			if outbox.IsPermanent(err) {
				kind = "permanent"
			}
			span.SetAttributes(semconv.ErrorTypeKey.String(kind))
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

var _ outbox.HookPublish = (*Tracing)(nil)

// The start options, built once: the no-op path allocates no slice.
var (
	linkedStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithNewRoot()}
	childStart  = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
)

// destination returns e's messaging.destination.name and, for RabbitMQ,
// its routing key.
func (t *Tracing) destination(e *outbox.Event) (dest, routingKey string) {
	var rendered string
	if t.cfg.Router != nil {
		rendered = t.cfg.Router.Route(e)
	}
	if t.cfg.System != SystemRabbitMQ {
		return cmp.Or(rendered, t.cfg.Destination), ""
	}
	exchange := t.cfg.Destination
	switch {
	case t.cfg.Router == nil:
		return exchange, "" // the routing key is not known here
	case exchange != "" && rendered != "":
		return exchange + ":" + rendered, rendered
	case exchange == "" && rendered == "":
		return rabbitMQDefaultExchange, ""
	default:
		return exchange + rendered, rendered
	}
}

func (t *Tracing) attributes(e *outbox.Event, dest, routingKey string) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 15)
	attrs = append(attrs,
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName(Operation),
		semconv.MessagingMessageID(e.UniqueID()),
		semconv.MessagingMessageBodySize(len(e.Payload)),
		AttrEventType.String(e.EventType),
		AttrAttempt.Int(e.Attempts+1),
	)
	if t.cfg.System != "" {
		attrs = append(attrs, semconv.MessagingSystemKey.String(t.cfg.System))
	}
	if dest != "" {
		attrs = append(attrs, semconv.MessagingDestinationName(dest))
	}
	if routingKey != "" {
		attrs = append(attrs, semconv.MessagingRabbitMQDestinationRoutingKey(routingKey))
	}
	if e.Tenant != "" {
		attrs = append(attrs, AttrTenant.String(e.Tenant))
	}
	if e.Database != "" {
		attrs = append(attrs, AttrDatabase.String(e.Database))
	}
	if e.AggregateType != "" {
		attrs = append(attrs, AttrAggregateType.String(e.AggregateType))
	}
	if e.AggregateID != "" {
		attrs = append(attrs, AttrAggregateID.String(e.AggregateID))
	}
	if id := e.CorrelationID(); id != "" {
		attrs = append(attrs, semconv.MessagingMessageConversationID(id))
	}
	return attrs
}

// replaceContext returns a copy of h whose trace context is ctx's. The copy
// keeps the stored row's map untouched; the writer's tracestate goes with
// its traceparent.
func (t *Tracing) replaceContext(ctx context.Context, h map[string]string) map[string]string {
	out := make(map[string]string, len(h)+2)
	maps.Copy(out, h)
	delete(out, outbox.HeaderTraceParent)
	delete(out, outbox.HeaderTraceState)
	t.prop.Inject(ctx, propagation.MapCarrier(out))
	return out
}
