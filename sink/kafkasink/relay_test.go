package kafkasink_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
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

func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 4)
	o := newTable(t)
	msgs := messages(120, "order.created")
	for i := range msgs {
		msgs[i].CorrelationID = "corr-" + strconv.Itoa(i)
		msgs[i].SchemaVersion = "3"
		msgs[i].Headers = map[string]string{outbox.HeaderTraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	}
	msgs[0].AggregateID = "" // no key, no subject attribute
	ids := o.write(t, msgs...)
	o.startRelay(t, outbox.RelayConfig{Sink: newSink(t, c.config(t, topic)), BatchSize: 50})

	got := c.consume(t, topic, len(ids))
	o.waitProcessed(t, int64(len(ids)))
	require.Equal(t, int64(len(ids)), c.count(t, topic), "each event once")
	byID := map[string][]byte{}
	records := map[string]int{}
	for i, r := range got {
		byID[header(r, "ce_id")] = r.Value
		records[header(r, "ce_id")] = i
	}
	require.Len(t, byID, len(ids), "no stray or repeated IDs")
	partitionOf := map[string]int32{}
	for i, id := range ids {
		r := got[records[strconv.FormatInt(id, 10)]]
		stored, err := o.mgr.Event(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, string(stored.Payload), string(r.Value), "payload bytes as stored")
		require.Equal(t, msgs[i].AggregateID, string(r.Key), "the key is the aggregate ID")
		if p, ok := partitionOf[string(r.Key)]; ok && len(r.Key) > 0 {
			require.Equal(t, p, r.Partition, "one aggregate, one partition")
		}
		partitionOf[string(r.Key)] = r.Partition
		require.Equal(t, "1.0", header(r, "ce_specversion"))
		require.Equal(t, "order.created", header(r, "ce_type"))
		require.Equal(t, "/outbox", header(r, "ce_source"))
		require.Equal(t, "application/json", header(r, "content-type"))
		require.Equal(t, "order", header(r, "ce_aggregatetype"))
		require.Equal(t, msgs[i].AggregateID, header(r, "ce_subject"))
		require.Equal(t, "corr-"+strconv.Itoa(i), header(r, "ce_correlationid"))
		require.Equal(t, "3", header(r, "ce_schemaversion"))
		require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", header(r, "traceparent"))
		ts, err := time.Parse(time.RFC3339Nano, header(r, "ce_time"))
		require.NoError(t, err)
		require.True(t, ts.Equal(stored.CreatedAt), "ce_time is the event's creation time")
	}
	require.Nil(t, got[records[strconv.FormatInt(ids[0], 10)]].Key, "an event without aggregate ID has no key")
}

func TestRelayBrokerDownAtStartAndMidRun(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 2)
	o := newTable(t)
	f := newFaults(t)
	cfg := c.config(t, topic)
	cfg.Dial = f.dial
	s := newSink(t, cfg)

	// Down at start: the relay begins while every broker refuses
	// connections.
	f.Refuse()
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
		SinkTimeout: 500 * time.Millisecond, Hooks: []outbox.Hook{hook},
	})
	select {
	case <-refused:
	case <-time.After(20 * time.Second):
		t.Fatal("the relay never failed a batch while the brokers were down")
	}
	require.Zero(t, o.stats(t).Processed)
	require.Zero(t, c.count(t, topic))
	f.Allow()
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
			f.Cut()
		case n == start+6 && down.CompareAndSwap(false, true):
			f.Refuse()
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
		t.Fatal("the relay never failed a batch while the brokers were down mid-run")
	}
	f.Allow()
	all := slices.Concat(first, second)
	o.waitProcessed(t, int64(len(all)))
	st := o.stats(t)
	require.Zero(t, st.Failed+st.Pending+st.Processing, "nothing dead-lettered or left behind")
	require.True(t, cut.Load() && down.Load(), "both faults happened mid-run")

	// At least once: every event is in the topic; a record abandoned by a
	// timed-out publish may have landed as well as its retry.
	n := c.count(t, topic)
	require.GreaterOrEqual(t, n, int64(len(all)))
	seen := map[string]bool{}
	for _, r := range c.consume(t, topic, int(n)) {
		seen[header(r, "ce_id")] = true
	}
	require.Len(t, seen, len(all), "consumers dedupe on ce_id: one distinct ID per event")
	for _, id := range all {
		require.True(t, seen[strconv.FormatInt(id, 10)], "event %d is in the topic", id)
	}
}

func TestRelayPoisonEventDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 1)
	o := newTable(t)
	msgs := messages(10, "order.created")
	msgs = append(msgs,
		outbox.Message{EventType: "order.poison", Headers: map[string]string{route.Header: "bad topic!"}, Payload: map[string]int{}},
		outbox.Message{EventType: "order.huge", Payload: map[string]string{"blob": strings.Repeat("x", 1500_000)}},
	)
	msgs = append(msgs, messages(10, "order.created")...)
	ids := o.write(t, msgs...)
	hook := &batchHook{}
	o.startRelay(t, outbox.RelayConfig{Sink: newSink(t, c.config(t, topic)), MaxAttempts: 5, Hooks: []outbox.Hook{hook}})

	testutil.WaitFor(t, 30*time.Second, "20 processed and 2 dead-lettered", func() bool {
		s := o.stats(t)
		return s.Processed == 20 && s.Failed == 2
	})
	require.Equal(t, int64(20), c.count(t, topic))
	for i, want := range map[int]string{10: "Kafka topic names hold only", 11: "MESSAGE_TOO_LARGE"} {
		e, err := o.mgr.Event(context.Background(), ids[i])
		require.NoError(t, err)
		require.Equal(t, outbox.StatusFailed, e.Status)
		require.Equal(t, 1, e.Attempts, "a permanent failure is dead-lettered at once")
		require.Contains(t, e.LastError, want)
	}
	require.Zero(t, hook.retried.Load(), "nothing was retried")
}
