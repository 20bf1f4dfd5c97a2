package mqttsink_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/mqttsink"
)

// table is one test's outbox table.
type table struct {
	pool   *pgxpool.Pool
	schema string
	writer *outbox.Writer
	mgr    *outbox.Manager
}

func newTable(t *testing.T) *table {
	pool, schema := testutil.Schema(t)
	return &table{
		pool: pool, schema: schema,
		writer: outbox.NewWriter(outbox.WriterConfig{Schema: schema}),
		mgr:    outbox.NewManager(outbox.Postgres(pool), outbox.ManagerConfig{Schema: schema}),
	}
}

// write stores msgs in one transaction and returns their IDs.
func (tb *table) write(t *testing.T, msgs ...outbox.Message) []int64 {
	t.Helper()
	var ids []int64
	err := pgx.BeginFunc(t.Context(), tb.pool, func(tx pgx.Tx) error {
		res, err := tb.writer.Write(t.Context(), tx, msgs...)
		ids = res.IDs
		return err
	})
	require.NoError(t, err)
	return ids
}

func (tb *table) stats(t *testing.T) outbox.Stats {
	t.Helper()
	s, err := tb.mgr.Stats(context.WithoutCancel(t.Context()))
	require.NoError(t, err)
	return s
}

func (tb *table) event(t *testing.T, id int64) outbox.Event {
	t.Helper()
	e, err := tb.mgr.Event(t.Context(), id)
	require.NoError(t, err)
	return e
}

// relay runs a fast-retrying relay over tb until the test ends.
func (tb *table) relay(t *testing.T, sink outbox.Sink, maxAttempts int) *outbox.Relay {
	t.Helper()
	r, err := outbox.NewRelay(outbox.Postgres(tb.pool), outbox.RelayConfig{
		Sink: sink, Schema: tb.schema, BatchSize: 10, PollInterval: 20 * time.Millisecond,
		Lease: 5 * time.Second, SinkTimeout: 2 * time.Second, MaxAttempts: maxAttempts,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	require.NoError(t, r.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
	return r
}

func order(i int) outbox.Message {
	return outbox.Message{
		EventType: "order.created", AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", i),
		Payload:       map[string]any{"n": i, "note": "zoë <&>"},
		CorrelationID: fmt.Sprintf("corr-%d", i), CausationID: "cmd-1", SchemaVersion: "3",
		Headers: map[string]string{
			outbox.HeaderTraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"tenant":                 "acme",
		},
	}
}

func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	tb := newTable(t)
	prefix := uniqueTopic(t)
	sub := subscribe(t, prefix+"/#")
	r, err := route.New(prefix + "/{aggregate_type}/{event_type}")
	require.NoError(t, err)
	s := newSink(t, mqttsink.Config{Router: r, Source: "urn:test"})

	const n = 25
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = order(i)
	}
	ids := tb.write(t, msgs...)
	tb.relay(t, s, 5)

	testutil.WaitFor(t, 10*time.Second, "every event received", func() bool { return len(sub.byID(t)) == n })
	testutil.WaitFor(t, 5*time.Second, "every event marked processed", func() bool { return tb.stats(t).Processed == n })
	got := sub.byID(t)
	for i, id := range ids {
		stored := tb.event(t, id)
		m, ok := got[strconv.FormatInt(id, 10)]
		require.True(t, ok, "event %d", id)
		require.Equal(t, prefix+"/order/order.created", m.Topic)
		require.Equal(t, string(stored.Payload), string(m.Event["data"]), "payload bytes as stored")
		require.Equal(t, "order.created", m.attr(t, "type"))
		require.Equal(t, "urn:test", m.attr(t, "source"))
		require.Equal(t, fmt.Sprintf("o-%d", i), m.attr(t, "subject"))
		require.Equal(t, stored.CreatedAt.UTC().Format(time.RFC3339Nano), m.attr(t, "time"))
		require.Equal(t, "order", m.attr(t, "aggregatetype"))
		require.Equal(t, fmt.Sprintf("corr-%d", i), m.attr(t, "correlationid"))
		require.Equal(t, "cmd-1", m.attr(t, "causationid"))
		require.Equal(t, "3", m.attr(t, "schemaversion"))
		require.Equal(t, "acme", m.attr(t, "tenant"))
		require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", m.attr(t, "traceparent"))
	}
}

func TestRelayLosesNothingWhileBrokerIsDown(t *testing.T) {
	t.Parallel()
	tb := newTable(t)
	prefix := uniqueTopic(t)
	sub := subscribe(t, prefix+"/#")
	p := tcpproxy.Start(t, brokerAddr(t))
	s := newSink(t, mqttsink.Config{URL: urlVia(t, p.Addr()), Router: under(t, prefix), ReconnectWait: 100 * time.Millisecond})

	// Down when the relay starts.
	p.Refuse()
	const first = 20
	msgs := make([]outbox.Message, first)
	for i := range msgs {
		msgs[i] = order(i)
	}
	tb.write(t, msgs...)
	tb.relay(t, s, 1000)
	testutil.WaitFor(t, 10*time.Second, "failed publishes while the broker is down", func() bool {
		events, err := tb.mgr.ListEvents(t.Context(), outbox.ListParams{Status: outbox.StatusPending})
		require.NoError(t, err)
		for _, e := range events {
			if e.Attempts > 0 {
				require.Contains(t, e.LastError, "mqttsink")
				return true
			}
		}
		return false
	})
	require.Empty(t, sub.messages())
	p.Allow()
	testutil.WaitFor(t, 15*time.Second, "the backlog delivered", func() bool { return tb.stats(t).Processed == first })

	// Cut mid-run, while events keep coming: once right after a write,
	// when a publish is likely in flight, once when the relay is idle.
	total := first
	for round := range 4 {
		accepted := p.Accepted()
		for i := range 10 {
			tb.write(t, order(100*(round+1)+i))
			total++
		}
		if round%2 == 1 {
			testutil.WaitFor(t, 15*time.Second, "the round delivered", func() bool { return tb.stats(t).Processed == int64(total) })
		}
		p.Cut()
		testutil.WaitFor(t, 10*time.Second, "a reconnect", func() bool { return p.Accepted() > accepted })
	}
	testutil.WaitFor(t, 20*time.Second, "every event processed", func() bool { return tb.stats(t).Processed == int64(total) })
	testutil.WaitFor(t, 5*time.Second, "every event received", func() bool { return len(sub.byID(t)) == total })
	st := tb.stats(t)
	require.Zero(t, st.Failed)
	require.Zero(t, st.Pending)
	require.GreaterOrEqual(t, len(sub.messages()), total, "duplicates are allowed, losses are not")
}

func TestRelayDeadLettersPoisonWithoutBlockingOthers(t *testing.T) {
	t.Parallel()
	tb := newTable(t)
	prefix := uniqueTopic(t)
	sub := subscribe(t, prefix+"/#")
	s := newSink(t, mqttsink.Config{Router: under(t, prefix)})

	poison := order(1)
	poison.Headers = map[string]string{route.Header: prefix + "/orders/+"}
	ids := tb.write(t, order(0), poison, order(2))
	tb.relay(t, s, 5)

	testutil.WaitFor(t, 10*time.Second, "the batch settled", func() bool {
		st := tb.stats(t)
		return st.Processed == 2 && st.Failed == 1
	})
	testutil.WaitFor(t, 5*time.Second, "the good events", func() bool { return len(sub.byID(t)) == 2 })
	dead := tb.event(t, ids[1])
	require.Equal(t, outbox.StatusFailed, dead.Status)
	require.Equal(t, 1, dead.Attempts, "a permanent error dead-letters at once")
	require.Contains(t, dead.LastError, "holds a wildcard")
}
