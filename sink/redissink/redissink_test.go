package redissink_test

import (
	"context"
	"maps"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/redissink"
	"github.com/outboxkit/outbox/sinktest"
)

// fixed routes every event to stream.
func fixed(t testing.TB, stream string) *route.Router {
	r, err := route.New(stream)
	require.NoError(t, err)
	return r
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(t *testing.T) sinktest.Harness {
		rdb := admin(t)
		stream := uniqueKey(t, rdb)
		fail := tcpproxy.Start(t, server.Addr(t))
		// No client-side retries, so a failing server fails fast.
		s := newSink(t, redissink.Config{URL: server.URLVia(t, fail.Addr()) + "?max_retries=-1", Router: fixed(t, stream)})
		return sinktest.Harness{
			Sink:      s,
			Delivered: sinktest.DeliveriesOf(received(rdb, stream)),
			Stall:     func(*testing.T) (<-chan struct{}, func()) { return fail.Stall() },
			Fail:      func(*testing.T) { fail.Refuse() },
			Unreachable: func(*testing.T) outbox.Sink {
				fail.Refuse()
				return s
			},
			// Routed to a key that holds a string: the server answers
			// that XADD with WRONGTYPE and runs the rest of the pipeline.
			Reject: func(t *testing.T, e *outbox.Event) {
				notAStream := uniqueKey(t, rdb)
				require.NoError(t, rdb.Set(t.Context(), notAStream, "a string", 0).Err())
				e.Headers = maps.Clone(e.Headers)
				e.Headers[route.Header] = notAStream
			},
		}
	})
}

func TestEntryFields(t *testing.T) {
	t.Parallel()
	rdb := admin(t)
	stream := uniqueKey(t, rdb)
	s := newSink(t, redissink.Config{Source: "urn:shop", Router: fixed(t, stream)})
	e := brokertest.FullEvent(4711, "X-Tenant", "acme")
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))
	msgs := entries(t, rdb, stream)
	require.Len(t, msgs, 1)
	require.Equal(t, map[string]any{
		"specversion":     "1.0",
		"id":              "4711",
		"type":            "order.created",
		"source":          "urn:shop",
		"subject":         "o-42",
		"time":            "2024-05-06T05:08:09.123456789Z",
		"datacontenttype": "application/json",
		"aggregatetype":   "order",
		"correlationid":   "corr-1",
		"causationid":     "cause-1",
		"schemaversion":   "2",
		"xtenant":         "acme",
		"traceparent":     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":      "vendor=abc",
		"data":            `{"total": 12.50, "items":[1,2]}`,
	}, msgs[0].Values)

	// The data field comes last, after the attributes, so a consumer that
	// reads fields in order sees the metadata first.
	raw, err := rdb.Do(t.Context(), "XRANGE", stream, "-", "+").Slice()
	require.NoError(t, err)
	fields := raw[0].([]any)[1].([]any)
	require.Equal(t, "data", fields[len(fields)-2])
}

func TestDefaultRouteIsAggregateAndEventType(t *testing.T) {
	t.Parallel()
	rdb := admin(t)
	s := newSink(t, redissink.Config{})
	e := sinktest.NewEvent("created", `{}`)
	e.AggregateType = uniqueKey(t, rdb)
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))
	stream := e.AggregateType + ".created"
	t.Cleanup(func() { rdb.Del(context.Background(), stream) })
	require.Len(t, entries(t, rdb, stream), 1)
}

func TestMaxLenTrims(t *testing.T) {
	t.Parallel()
	rdb := admin(t)
	for _, exact := range []bool{false, true} {
		stream := uniqueKey(t, rdb)
		s := newSink(t, redissink.Config{Router: fixed(t, stream), MaxLen: 10, MaxLenExact: exact})
		events := make([]outbox.Event, 500)
		for i := range events {
			events[i] = sinktest.NewEvent("x", `{}`)
		}
		require.Nil(t, s.Publish(t.Context(), events))
		n, err := rdb.XLen(t.Context(), stream).Result()
		require.NoError(t, err)
		if exact {
			require.EqualValues(t, 10, n)
		} else {
			// Approximate trimming keeps whole macro nodes (100 entries
			// by default).
			require.GreaterOrEqual(t, n, int64(10))
			require.Less(t, n, int64(500))
		}
		last := entries(t, rdb, stream)
		require.Equal(t, "x", last[len(last)-1].Values["type"])
	}
}

func TestWrongTypeIsPermanentAndDoesNotFailTheBatch(t *testing.T) {
	t.Parallel()
	rdb := admin(t)
	stream := uniqueKey(t, rdb)
	notAStream := uniqueKey(t, rdb)
	require.NoError(t, rdb.Set(t.Context(), notAStream, "a string", 0).Err())
	s := newSink(t, redissink.Config{Router: fixed(t, stream)})

	poison := sinktest.NewEvent("x", `{}`)
	poison.Headers[route.Header] = notAStream
	good := []outbox.Event{sinktest.NewEvent("x", `{"n":1}`), sinktest.NewEvent("x", `{"n":2}`)}
	errs := s.Publish(t.Context(), []outbox.Event{good[0], poison, good[1]})
	require.Len(t, errs, 3)
	require.NoError(t, errs[0])
	require.NoError(t, errs[2])
	require.True(t, outbox.IsPermanent(errs[1]), "%v", errs[1])
	require.ErrorContains(t, errs[1], `stream key "`+notAStream+`" holds a value that is not a stream`)
	require.Len(t, entries(t, rdb, stream), 2)
}

func TestEmptyStreamKeyIsPermanent(t *testing.T) {
	t.Parallel()
	brokertest.RequirePermanent(t, newSink(t, redissink.Config{Router: brokertest.EmptyRoute(t)}), "empty stream key")
}

func TestNewFailsWhenServerUnreachable(t *testing.T) {
	t.Parallel()
	const pw = "s3cret-pw"
	_, err := redissink.New(t.Context(), redissink.Config{URL: "redis://:" + pw + "@127.0.0.1:1/0"})
	brokertest.RequireConnectError(t, err, pw, "redissink: connect to redis://127.0.0.1:1/0: ", "is Redis running and reachable?")
}

func TestNewFailsOnBadPassword(t *testing.T) {
	t.Parallel()
	const pw = "wrong-password-x"
	_, err := redissink.New(t.Context(), redissink.Config{URL: "redis://nobody:" + pw + "@" + server.Addr(t) + "/0"})
	brokertest.RequireConnectError(t, err, pw, "check the user and password")
}

func TestNewHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := redissink.New(ctx, redissink.Config{URL: server.URL()})
	require.ErrorIs(t, err, context.Canceled)
}

func TestReconnectsAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	rdb := admin(t)
	stream := uniqueKey(t, rdb)
	p := tcpproxy.Start(t, server.Addr(t))
	s := newSink(t, redissink.Config{URL: server.URLVia(t, p.Addr()), Router: fixed(t, stream)})
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("x", `{}`)}))
	accepted := p.Accepted()
	p.Cut()
	// go-redis replaces the dead pooled connection and retries.
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("x", `{}`)}))
	require.Greater(t, p.Accepted(), accepted)
	require.Len(t, entries(t, rdb, stream), 2)
}

func TestUsesGivenClient(t *testing.T) {
	t.Parallel()
	rdb := admin(t)
	stream := uniqueKey(t, rdb)
	s := newSink(t, redissink.Config{Client: rdb, Router: fixed(t, stream)})
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("x", `{}`)}))
	require.NoError(t, s.Close())
	require.NoError(t, rdb.Ping(t.Context()).Err(), "the sink does not close a client it was given")
	require.Len(t, entries(t, rdb, stream), 1)
}

func TestPublishAfterClose(t *testing.T) {
	t.Parallel()
	s, err := redissink.New(t.Context(), redissink.Config{URL: server.URL()})
	require.NoError(t, err)
	require.ErrorContains(t, brokertest.PublishAfterClose(t, s), "sink is closed")
}

var _ redis.UniversalClient = (*redis.Client)(nil)
