package natssink_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
	"github.com/outboxkit/outbox/route"
)

// outboxTable is a test's outbox table in a schema of its own.
type outboxTable struct {
	pool   *pgxpool.Pool
	db     outbox.Database
	schema string
	writer *outbox.Writer
	mgr    *outbox.Manager
}

// newTable migrates a fresh schema, dropped when t ends.
func newTable(t *testing.T) *outboxTable {
	t.Helper()
	pool, schema := testutil.Schema(t)
	db := outbox.Postgres(pool)
	return &outboxTable{
		pool: pool, db: db, schema: schema,
		writer: outbox.NewWriter(outbox.WriterConfig{Schema: schema}),
		mgr:    outbox.NewManager(db, outbox.ManagerConfig{Schema: schema}),
	}
}

// write commits msgs in one transaction and returns their IDs.
func (o *outboxTable) write(t *testing.T, msgs ...outbox.Message) []int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := o.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	res, err := o.writer.Write(ctx, tx, msgs...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	return res.IDs
}

// messages returns n plain messages of type typ.
func messages(n int, typ string) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{
			EventType: typ, AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", i%7),
			Payload: map[string]any{"i": i, "note": "zoë <&>"},
		}
	}
	return msgs
}

func (o *outboxTable) stats(t *testing.T) outbox.Stats {
	t.Helper()
	s, err := o.mgr.Stats(context.Background())
	require.NoError(t, err)
	return s
}

// waitProcessed waits until n events are processed.
func (o *outboxTable) waitProcessed(t *testing.T, n int64) {
	t.Helper()
	testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%d events processed", n), func() bool { return o.stats(t).Processed == n })
}

// startRelay runs a relay on o until t ends.
func (o *outboxTable) startRelay(t *testing.T, cfg outbox.RelayConfig) *outbox.Relay {
	t.Helper()
	cfg.Schema = o.schema
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	cfg.Logger = quiet
	r, err := outbox.NewRelay(o.db, cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
	return r
}

// batchHook counts a relay's outcomes and calls its callback, if set,
// after every batch with the batch's number.
type batchHook struct {
	published, retried, dead, batches atomic.Int64
	callback                          atomic.Pointer[func(n int64, info outbox.BatchInfo)]
}

func (h *batchHook) OnBatch(_ context.Context, info outbox.BatchInfo) {
	h.published.Add(int64(info.Published))
	h.retried.Add(int64(info.Retried))
	h.dead.Add(int64(info.Dead))
	n := h.batches.Add(1)
	if f := h.callback.Load(); f != nil {
		(*f)(n, info)
	}
}

func (h *batchHook) onBatch(f func(n int64, info outbox.BatchInfo)) { h.callback.Store(&f) }

// consume reads n messages from b's stream with a real JetStream consumer.
func (b *broker) consume(t *testing.T, n int) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := b.js.OrderedConsumer(ctx, b.stream, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	var got []jetstream.Msg
	for len(got) < n {
		batch, err := cons.Fetch(n-len(got), jetstream.FetchMaxWait(time.Second))
		require.NoError(t, err)
		for m := range batch.Messages() {
			got = append(got, m)
		}
		require.NoError(t, batch.Error())
		require.NoError(t, ctx.Err(), "consumed %d of %d messages", len(got), n)
	}
	return got
}

func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	o := newTable(t)
	msgs := messages(120, "order.created")
	for i := range msgs {
		msgs[i].CorrelationID = "corr-" + strconv.Itoa(i)
		msgs[i].SchemaVersion = "3"
		msgs[i].Headers = map[string]string{outbox.HeaderTraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	}
	msgs[0].AggregateID = "" // no subject attribute
	ids := o.write(t, msgs...)
	cfg := b.config(t)
	cfg.Router = mustRouter(t, b.prefix+".{aggregate_type}.{event_type}")
	o.startRelay(t, outbox.RelayConfig{Sink: newSink(t, cfg), BatchSize: 50})

	got := b.consume(t, len(ids))
	o.waitProcessed(t, int64(len(ids)))
	require.Equal(t, uint64(len(ids)), b.count(t), "each event once")
	byID := map[string]jetstream.Msg{}
	for _, m := range got {
		require.Equal(t, m.Headers().Get("ce-id"), m.Headers().Get(jetstream.MsgIDHeader), "Nats-Msg-Id is the event ID")
		byID[m.Headers().Get("ce-id")] = m
	}
	for i, id := range ids {
		m, ok := byID[strconv.FormatInt(id, 10)]
		require.True(t, ok, "event %d reached the consumer", id)
		stored, err := o.mgr.Event(context.Background(), id)
		require.NoError(t, err)
		h := m.Headers()
		require.Equal(t, b.prefix+".order.order.created", m.Subject())
		require.Equal(t, string(stored.Payload), string(m.Data()), "payload bytes as stored")
		require.Equal(t, "1.0", h.Get("ce-specversion"))
		require.Equal(t, "order.created", h.Get("ce-type"))
		require.Equal(t, "/outbox", h.Get("ce-source"))
		require.Equal(t, "application/json", h.Get("ce-datacontenttype"))
		require.Equal(t, "order", h.Get("ce-aggregatetype"))
		require.Equal(t, msgs[i].AggregateID, h.Get("ce-subject"))
		require.Equal(t, "corr-"+strconv.Itoa(i), h.Get("ce-correlationid"))
		require.Equal(t, "3", h.Get("ce-schemaversion"))
		require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", h.Get("traceparent"))
		ts, err := time.Parse(time.RFC3339Nano, h.Get("ce-time"))
		require.NoError(t, err)
		require.True(t, ts.Equal(stored.CreatedAt), "ce-time is the event's creation time")
	}
	require.Len(t, byID, len(ids), "no stray or repeated IDs")
}

func TestRelayBrokerDownAtStartAndMidRun(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	o := newTable(t)
	proxy := tcpproxy.Start(t, natsAddr())
	cfg := b.config(t)
	cfg.Servers = []string{proxy.Addr()}
	cfg.ReconnectWait = 20 * time.Millisecond
	cfg.AckTimeout = time.Second
	s := newSink(t, cfg)

	// Down at start: the relay begins while the server refuses connections.
	proxy.Refuse()
	first := o.write(t, messages(30, "order.created")...)
	refused := make(chan struct{})
	var once sync.Once
	hook := &batchHook{}
	hook.onBatch(func(_ int64, info outbox.BatchInfo) {
		if info.Retried > 0 {
			once.Do(func() { close(refused) })
		}
	})
	o.startRelay(t, outbox.RelayConfig{
		Sink: s, BatchSize: 10, MaxAttempts: 10000, BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		Hooks: []outbox.Hook{hook},
	})
	select {
	case <-refused:
	case <-time.After(20 * time.Second):
		t.Fatal("the relay never failed a batch while the server was down")
	}
	require.Zero(t, o.stats(t).Processed)
	require.Zero(t, b.count(t))
	proxy.Allow()
	o.waitProcessed(t, int64(len(first)))

	// Down mid-run: cut every connection after a few batches, then refuse
	// connections for a while.
	var cut, down atomic.Bool
	downSeen := make(chan struct{})
	var downOnce sync.Once
	start := hook.batches.Load()
	hook.onBatch(func(n int64, info outbox.BatchInfo) {
		switch {
		case n == start+3 && cut.CompareAndSwap(false, true):
			proxy.Cut()
		case n == start+6 && down.CompareAndSwap(false, true):
			proxy.Refuse()
		case down.Load() && info.Retried > 0:
			downOnce.Do(func() { close(downSeen) })
		}
	})
	var second []int64
	for range 10 {
		second = append(second, o.write(t, messages(20, "order.updated")...)...)
	}
	select {
	case <-downSeen:
	case <-time.After(20 * time.Second):
		t.Fatal("the relay never failed a batch while the server was down mid-run")
	}
	proxy.Allow()
	total := len(first) + len(second)
	o.waitProcessed(t, int64(total))
	st := o.stats(t)
	require.Zero(t, st.Failed+st.Pending+st.Processing, "nothing dead-lettered or left behind")
	require.Equal(t, uint64(total), b.count(t), "every event is in the stream exactly once (re-publishes deduplicated)")
	seen := map[string]bool{}
	for _, m := range b.messages(t, 1) {
		seen[m.Header.Get(jetstream.MsgIDHeader)] = true
	}
	for _, id := range append(first, second...) {
		require.True(t, seen[strconv.FormatInt(id, 10)], "event %d is in the stream", id)
	}
	require.True(t, cut.Load() && down.Load(), "both faults happened mid-run")
	require.Greater(t, proxy.Accepted(), 2, "the client reconnected")
}

func TestRelayPoisonEventDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	o := newTable(t)
	msgs := messages(10, "order.created")
	msgs = append(msgs,
		outbox.Message{EventType: "order.poison", Headers: map[string]string{route.Header: b.prefix + ".bad subject"}, Payload: map[string]int{}},
		outbox.Message{EventType: "order.huge", Payload: map[string]string{"blob": strings.Repeat("x", 1500_000)}},
	)
	msgs = append(msgs, messages(10, "order.created")...)
	ids := o.write(t, msgs...)
	hook := &batchHook{}
	o.startRelay(t, outbox.RelayConfig{Sink: newSink(t, b.config(t)), MaxAttempts: 5, Hooks: []outbox.Hook{hook}})

	testutil.WaitFor(t, 30*time.Second, "20 processed and 2 dead-lettered", func() bool {
		s := o.stats(t)
		return s.Processed == 20 && s.Failed == 2
	})
	require.Equal(t, uint64(20), b.count(t))
	for i, want := range map[int]string{10: "whitespace", 11: "max_payload"} {
		e, err := o.mgr.Event(context.Background(), ids[i])
		require.NoError(t, err)
		require.Equal(t, outbox.StatusFailed, e.Status)
		require.Equal(t, 1, e.Attempts, "a permanent failure is dead-lettered at once")
		require.Contains(t, e.LastError, want)
	}
	require.Zero(t, hook.retried.Load(), "nothing was retried")
}

// freezingSink publishes through its sink and then hangs, ignoring its
// context, like a relay process that froze (or was killed) after the
// broker stored its events and before it marked them processed.
type freezingSink struct {
	sink      outbox.Sink
	published chan struct{}
	thaw      chan struct{}
	once      sync.Once
}

func (f *freezingSink) Publish(ctx context.Context, events []outbox.Event) []error {
	errs := f.sink.Publish(ctx, events)
	f.once.Do(func() { close(f.published) })
	<-f.thaw
	return errs
}

func TestJetStreamDropsRepublishAfterRelayCrash(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	o := newTable(t)
	ids := o.write(t, messages(25, "order.created")...)

	frozen := &freezingSink{sink: newSink(t, b.config(t)), published: make(chan struct{}), thaw: make(chan struct{})}
	o.startRelay(t, outbox.RelayConfig{Sink: frozen, RelayID: "relay-a", Lease: 2 * time.Second, SinkTimeout: time.Second})
	t.Cleanup(func() { close(frozen.thaw) }) // runs before relay-a is stopped
	select {
	case <-frozen.published:
	case <-time.After(20 * time.Second):
		t.Fatal("relay-a never published")
	}
	require.Equal(t, uint64(len(ids)), b.count(t), "relay-a's publish reached the stream")
	require.Zero(t, o.stats(t).Processed, "relay-a never marked its events")

	// Another relay, with its own connection, takes the events over once
	// relay-a's lease expires and publishes them again.
	hook := &batchHook{}
	o.startRelay(t, outbox.RelayConfig{
		Sink: newSink(t, b.config(t)), RelayID: "relay-b", Lease: 2 * time.Second, RescueInterval: 100 * time.Millisecond,
		Hooks: []outbox.Hook{hook},
	})
	o.waitProcessed(t, int64(len(ids)))
	require.Equal(t, int64(len(ids)), hook.published.Load(), "relay-b published every event again")
	require.Equal(t, uint64(len(ids)), b.count(t), "JetStream dropped the re-published events: one message per event")
	e, err := o.mgr.Event(context.Background(), ids[0])
	require.NoError(t, err)
	require.Equal(t, "relay-b", e.LockedBy)
}
