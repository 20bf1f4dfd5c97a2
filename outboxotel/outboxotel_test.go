package outboxotel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxotel"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/route"
)

type bundle struct {
	spans    *tracetest.SpanRecorder
	tp       *sdktrace.TracerProvider
	rec      *outboxtest.Recorder
	mgr      *outbox.Manager
	srv      *httptest.Server
	handlerC chan trace.SpanContext // the handler's span, once per request
}

// setup runs an application (an HTTP handler that writes an event in its
// transaction) and a relay, both traced into one span recorder.
func setup(t *testing.T, cfg outboxotel.Config) bundle {
	t.Helper()
	pool, schema := testutil.Schema(t)
	db := outbox.Postgres(pool)
	b := bundle{spans: tracetest.NewSpanRecorder(), rec: outboxtest.NewRecorder(),
		mgr: outbox.NewManager(db, outbox.ManagerConfig{Schema: schema}), handlerC: make(chan trace.SpanContext, 10)}
	b.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.spans))
	t.Cleanup(func() { require.NoError(t, b.tp.Shutdown(context.Background())) })
	cfg.TracerProvider = b.tp
	tracing := outboxotel.New(cfg)

	writer := outbox.NewWriter(outbox.WriterConfig{Schema: schema, HeadersFromContext: tracing.HeadersFromContext})
	appTracer := b.tp.Tracer("app")
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := appTracer.Start(r.Context(), "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		tx, err := pool.Begin(ctx)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer func() { _ = tx.Rollback(ctx) }()
		// The business row would be written here, in the same transaction.
		if _, err := writer.Write(ctx, tx, outbox.Message{EventType: r.URL.Query().Get("type"), AggregateType: "order",
			AggregateID: "42", CorrelationID: "corr-1", Payload: map[string]int{"order": 42}}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if err := tx.Commit(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		b.handlerC <- span.SpanContext()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(b.srv.Close)

	relay, err := outbox.NewRelay(db, outbox.RelayConfig{Schema: schema, Sink: b.rec, Hooks: []outbox.Hook{tracing},
		PollInterval: 20 * time.Millisecond, MaxAttempts: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, relay.Stop(ctx))
	})
	return b
}

// order posts an order with the given event type and returns the handler's
// span context.
func (b bundle) order(t *testing.T, eventType string) trace.SpanContext {
	t.Helper()
	resp, err := http.Post(b.srv.URL+"/orders?type="+eventType, "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	return <-b.handlerC
}

// publishSpan waits for the ended publish span of eventType.
func (b bundle) publishSpan(t *testing.T, eventType string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	testutil.WaitFor(t, 30*time.Second, "the publish span of "+eventType, func() bool {
		for _, s := range b.spans.Ended() {
			if attrs(s)[outboxotel.AttrEventType].AsString() == eventType {
				found = s
				return true
			}
		}
		return false
	})
	return found
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func parseTraceparent(t *testing.T, h map[string]string) trace.SpanContext {
	t.Helper()
	require.NotEmpty(t, h["traceparent"], "headers %v", h)
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(h)))
}

func TestTraceFromRequestToSinkIsLinked(t *testing.T) {
	t.Parallel()
	b := setup(t, outboxotel.Config{System: "kafka", Destination: "orders"})
	handler := b.order(t, "order.created")

	b.rec.WaitLen(t, 1, 30*time.Second)
	delivered := b.rec.Events()[0]
	// The stored row holds the handler's context.
	stored, err := b.mgr.Event(context.Background(), delivered.ID)
	require.NoError(t, err)
	storedSC := parseTraceparent(t, stored.Headers)
	require.Equal(t, handler.TraceID(), storedSC.TraceID())
	require.Equal(t, handler.SpanID(), storedSC.SpanID())

	// The sink got the publish span's context: a new trace, linked back to
	// the handler's span.
	span := b.publishSpan(t, "order.created")
	require.Equal(t, "send orders", span.Name())
	require.Equal(t, trace.SpanKindProducer, span.SpanKind())
	sinkSC := parseTraceparent(t, delivered.Headers)
	require.Equal(t, span.SpanContext().TraceID(), sinkSC.TraceID())
	require.Equal(t, span.SpanContext().SpanID(), sinkSC.SpanID())
	require.NotEqual(t, handler.TraceID(), sinkSC.TraceID())
	require.False(t, span.Parent().IsValid(), "a linked publish span starts a trace")
	require.Len(t, span.Links(), 1)
	require.Equal(t, handler.TraceID(), span.Links()[0].SpanContext.TraceID())
	require.Equal(t, handler.SpanID(), span.Links()[0].SpanContext.SpanID())

	a := attrs(span)
	require.Equal(t, "kafka", a["messaging.system"].AsString())
	require.Equal(t, "orders", a["messaging.destination.name"].AsString())
	require.Equal(t, "send", a["messaging.operation.type"].AsString())
	require.Equal(t, "send", a["messaging.operation.name"].AsString())
	require.Equal(t, "corr-1", a["messaging.message.conversation_id"].AsString())
	require.Equal(t, "order.created", a[outboxotel.AttrEventType].AsString())
	require.Equal(t, "42", a[outboxotel.AttrAggregateID].AsString())
	require.Equal(t, int64(1), a[outboxotel.AttrAttempt].AsInt64())
	require.Equal(t, codes.Unset, span.Status().Code)
	require.Equal(t, strings.TrimLeft(a["messaging.message.id"].AsString(), "0"), a["messaging.message.id"].AsString())
	require.NotEmpty(t, a["messaging.message.id"].AsString())
	// Headers other than the trace context reach the sink unchanged.
	require.Equal(t, "corr-1", delivered.Headers[outbox.HeaderCorrelationID])
}

func TestTraceChildOfWriter(t *testing.T) {
	t.Parallel()
	b := setup(t, outboxotel.Config{ChildOfWriter: true})
	handler := b.order(t, "order.paid")
	b.rec.WaitLen(t, 1, 30*time.Second)
	span := b.publishSpan(t, "order.paid")
	require.Equal(t, handler.TraceID(), span.SpanContext().TraceID())
	require.Equal(t, handler.SpanID(), span.Parent().SpanID())
	require.Empty(t, span.Links())
	sinkSC := parseTraceparent(t, b.rec.Events()[0].Headers)
	require.Equal(t, handler.TraceID(), sinkSC.TraceID())
	require.Equal(t, span.SpanContext().SpanID(), sinkSC.SpanID())
}

func TestPublishErrorIsRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t, outboxotel.Config{})
	b.rec.SetFail(func(e outbox.Event) error {
		if e.EventType == "order.bad" {
			return outbox.Permanent(errors.New("schema violation"))
		}
		return nil
	})
	b.order(t, "order.bad")
	span := b.publishSpan(t, "order.bad")
	// No system, no destination: the span is named after the operation
	// alone.
	require.Equal(t, "send", span.Name())
	require.NotContains(t, attrs(span), attribute.Key("messaging.system"))
	require.NotContains(t, attrs(span), attribute.Key("messaging.destination.name"))
	require.Equal(t, codes.Error, span.Status().Code)
	require.Equal(t, "schema violation", span.Status().Description)
	require.Equal(t, "permanent", attrs(span)["error.type"].AsString())
	require.Len(t, span.Events(), 1)
	require.Equal(t, "exception", span.Events()[0].Name)
}

func TestUntracedWriteStoresNothing(t *testing.T) {
	t.Parallel()
	tracing := outboxotel.New(outboxotel.Config{})
	require.Nil(t, tracing.HeadersFromContext(context.Background()))
	require.Nil(t, outboxotel.WriterHeaders(nil)(context.Background()))

	// A span from an SDK is stored, with its tracestate.
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	ctx, span := tp.Tracer("t").Start(context.Background(), "op")
	defer span.End()
	ts, err := trace.ParseTraceState("vendor=abc")
	require.NoError(t, err)
	ctx = trace.ContextWithSpanContext(ctx, span.SpanContext().WithTraceState(ts))
	h := outboxotel.WriterHeaders(nil)(ctx)
	require.Equal(t, "vendor=abc", h["tracestate"])
	require.Equal(t, span.SpanContext().TraceID(), parseTraceparent(t, h).TraceID())
}

func TestNoTracerProviderLeavesHeadersAlone(t *testing.T) {
	t.Parallel()
	for name, tp := range map[string]trace.TracerProvider{"noop": noop.NewTracerProvider(), "global": nil} {
		tracing := outboxotel.New(outboxotel.Config{TracerProvider: tp})
		headers := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "a=b"}
		e := &outbox.Event{ID: 1, EventType: "x", Headers: headers}
		require.Nil(t, tracing.OnPublish(context.Background(), e), name)
		require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", e.Headers["traceparent"], name)
		require.Equal(t, "a=b", e.Headers["tracestate"], name)
	}
}

func TestSampledOutSpanStillPropagates(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	tracing := outboxotel.New(outboxotel.Config{TracerProvider: tp})
	stored := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "a=b", "k": "v"}
	e := &outbox.Event{ID: 1, EventType: "x", Headers: stored}
	done := tracing.OnPublish(context.Background(), e)
	require.NotNil(t, done)
	done(nil)
	// The sink sees an unsampled context of a new trace; the stored map is
	// untouched.
	require.NotEqual(t, stored["traceparent"], e.Headers["traceparent"])
	require.True(t, strings.HasSuffix(e.Headers["traceparent"], "-00"), e.Headers["traceparent"])
	require.NotContains(t, e.Headers, "tracestate")
	require.Equal(t, "v", e.Headers["k"])
	require.Equal(t, "a=b", stored["tracestate"])
	require.Empty(t, spans.Ended())
}

func TestNoopCostsNoAllocations(t *testing.T) {
	// Not parallel: AllocsPerRun measures the whole process.
	tracing := outboxotel.New(outboxotel.Config{TracerProvider: noop.NewTracerProvider()})
	e := &outbox.Event{ID: 1, EventType: "x", Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	ctx := context.Background()
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = tracing.HeadersFromContext(ctx) }))
	// One: the context the no-op Start returns.
	require.LessOrEqual(t, testing.AllocsPerRun(100, func() { _ = tracing.OnPublish(ctx, e) }), 1.0)
}

// TestSpanNameAndDestinationFollowTheRoute checks that each span is named
// "send {destination}" with the destination the sink's router renders for
// its event, and RabbitMQ's exchange:routing key form.
func TestSpanNameAndDestinationFollowTheRoute(t *testing.T) {
	t.Parallel()
	router, err := route.New("", route.Rule{EventType: "user.*", Topic: "users.{event_type}"})
	require.NoError(t, err)
	byHeader, err := route.New("{header.rk}")
	require.NoError(t, err)
	order := outbox.Event{ID: 7, EventType: "order_created", AggregateType: "order", Headers: map[string]string{}}
	user := outbox.Event{ID: 8, EventType: "user.deleted", Headers: map[string]string{}}
	overridden := outbox.Event{ID: 9, EventType: "order_created", AggregateType: "order", Headers: map[string]string{route.Header: "audit"}}
	for _, tc := range []struct {
		name     string
		cfg      outboxotel.Config
		event    outbox.Event
		wantName string
		wantDest string // "" for no messaging.destination.name
		wantKey  string // messaging.rabbitmq.destination.routing_key
	}{
		{name: "default template", cfg: outboxotel.Config{System: outboxotel.SystemKafka, Router: router},
			event: order, wantName: "send order.order_created", wantDest: "order.order_created"},
		{name: "rule", cfg: outboxotel.Config{System: outboxotel.SystemNATS, Router: router},
			event: user, wantName: "send users.user.deleted", wantDest: "users.user.deleted"},
		{name: "header override", cfg: outboxotel.Config{System: outboxotel.SystemRedis, Router: router},
			event: overridden, wantName: "send audit", wantDest: "audit"},
		{name: "router wins over the static destination", cfg: outboxotel.Config{Router: router, Destination: "static"},
			event: order, wantName: "send order.order_created", wantDest: "order.order_created"},
		{name: "static destination", cfg: outboxotel.Config{System: outboxotel.SystemKafka, Destination: "orders"},
			event: user, wantName: "send orders", wantDest: "orders"},
		{name: "no destination", cfg: outboxotel.Config{},
			event: order, wantName: "send"},
		{name: "rabbitmq exchange and routing key", cfg: outboxotel.Config{System: outboxotel.SystemRabbitMQ, Router: router, Destination: "events"},
			event: order, wantName: "send events:order.order_created", wantDest: "events:order.order_created", wantKey: "order.order_created"},
		{name: "rabbitmq default exchange", cfg: outboxotel.Config{System: outboxotel.SystemRabbitMQ, Router: router},
			event: user, wantName: "send users.user.deleted", wantDest: "users.user.deleted", wantKey: "users.user.deleted"},
		{name: "rabbitmq default exchange, empty routing key", cfg: outboxotel.Config{System: outboxotel.SystemRabbitMQ, Router: byHeader},
			event: order, wantName: "send amq.default", wantDest: "amq.default"},
		{name: "rabbitmq without router", cfg: outboxotel.Config{System: outboxotel.SystemRabbitMQ, Destination: "events"},
			event: order, wantName: "send events", wantDest: "events"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spans := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
			tc.cfg.TracerProvider = tp
			e := tc.event
			outboxotel.New(tc.cfg).OnPublish(context.Background(), &e)(nil)
			require.Len(t, spans.Ended(), 1)
			span := spans.Ended()[0]
			require.Equal(t, tc.wantName, span.Name())
			a := attrs(span)
			if tc.wantDest == "" {
				require.NotContains(t, a, attribute.Key("messaging.destination.name"))
			} else {
				require.Equal(t, tc.wantDest, a["messaging.destination.name"].AsString())
			}
			if tc.wantKey == "" {
				require.NotContains(t, a, attribute.Key("messaging.rabbitmq.destination.routing_key"))
			} else {
				require.Equal(t, tc.wantKey, a["messaging.rabbitmq.destination.routing_key"].AsString())
			}
			if tc.cfg.System == "" {
				require.NotContains(t, a, attribute.Key("messaging.system"))
			} else {
				require.Equal(t, tc.cfg.System, a["messaging.system"].AsString())
			}
		})
	}
}

// A tenant relay's publish span names the tenant and the database, and
// its message id is the qualified one brokers dedup on.
func TestSpanCarriesTenant(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	tracing := outboxotel.New(outboxotel.Config{TracerProvider: tp})
	for _, e := range []outbox.Event{
		{ID: 42, EventType: "tenant.event", Tenant: "s_acme", Database: "db1:5432/app"},
		{ID: 42, EventType: "plain.event"},
	} {
		done := tracing.OnPublish(context.Background(), &e)
		require.NotNil(t, done)
		done(nil)
	}
	ended := spans.Ended()
	require.Len(t, ended, 2)
	a := attrs(ended[0])
	require.Equal(t, "s_acme", a[outboxotel.AttrTenant].AsString())
	require.Equal(t, "db1:5432/app", a[outboxotel.AttrDatabase].AsString())
	require.Equal(t, "db1%3A5432/app:s_acme:42", a["messaging.message.id"].AsString())
	plain := attrs(ended[1])
	require.NotContains(t, plain, outboxotel.AttrTenant)
	require.NotContains(t, plain, outboxotel.AttrDatabase)
}
