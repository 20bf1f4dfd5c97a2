// Package relaytest runs a real relay over a real outbox table, for the
// end-to-end tests of the sinks: a migrated table in a schema of its own,
// writing in a transaction, waiting for the relay, and a hook that counts
// a relay's batches. sinktest's relay scenarios are built on it; a sink's
// own relay tests (natssink's crash test) use it directly.
package relaytest

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
)

// VerifyTestMain runs the tests of m and then fails if goroutines leaked,
// except those of the shared test database pool, which lives for the
// whole test binary.
func VerifyTestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/jackc/puddle/v2.(*Pool[...]).createIdleResources"),
	)
}

// Quiet is a logger that drops everything.
var Quiet = slog.New(slog.DiscardHandler)

// TraceParent is the W3C trace context Messages carry.
const TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// Table is a test's outbox table in a schema of its own.
type Table struct {
	Pool    *pgxpool.Pool
	DB      outbox.Database
	Schema  string
	Writer  *outbox.Writer
	Manager *outbox.Manager
}

// NewTable migrates a fresh schema on the test database, dropped when t
// ends.
func NewTable(t *testing.T) *Table {
	t.Helper()
	pool, schema := testutil.Schema(t)
	db := outbox.Postgres(pool)
	return &Table{
		Pool: pool, DB: db, Schema: schema,
		Writer:  outbox.NewWriter(outbox.WriterConfig{Schema: schema}),
		Manager: outbox.NewManager(db, outbox.ManagerConfig{Schema: schema}),
	}
}

// Write commits msgs in one transaction and returns their IDs.
func (tb *Table) Write(t *testing.T, msgs ...outbox.Message) []int64 {
	t.Helper()
	var ids []int64
	err := pgx.BeginFunc(t.Context(), tb.Pool, func(tx pgx.Tx) error {
		res, err := tb.Writer.Write(t.Context(), tx, msgs...)
		ids = res.IDs
		return err
	})
	require.NoError(t, err)
	return ids
}

// Stats returns the table's counts by status.
func (tb *Table) Stats(t *testing.T) outbox.Stats {
	t.Helper()
	s, err := tb.Manager.Stats(context.WithoutCancel(t.Context()))
	require.NoError(t, err)
	return s
}

// Event returns the stored event id.
func (tb *Table) Event(t *testing.T, id int64) outbox.Event {
	t.Helper()
	e, err := tb.Manager.Event(context.WithoutCancel(t.Context()), id)
	require.NoError(t, err)
	return e
}

// WaitProcessed waits up to timeout until n events are processed.
func (tb *Table) WaitProcessed(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	testutil.WaitFor(t, timeout, fmt.Sprintf("%d events processed", n), func() bool { return tb.Stats(t).Processed == int64(n) })
}

// StartRelay runs a relay over the table until t ends, with a poll
// interval of 20ms unless cfg sets one and a logger that drops
// everything.
func (tb *Table) StartRelay(t *testing.T, cfg outbox.RelayConfig) *outbox.Relay {
	t.Helper()
	cfg.Schema = tb.Schema
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	cfg.Logger = Quiet
	r, err := outbox.NewRelay(tb.DB, cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
	return r
}

// Messages returns n order messages of type typ for aggregates o-0 to o-6
// in turn, with a non-ASCII payload, a correlation ID corr-<i>, causation
// ID cmd-1, schema version 3, the trace context TraceParent and a header
// tenant=acme.
func Messages(n int, typ string) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{
			EventType: typ, AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", i%7),
			Payload:       map[string]any{"i": i, "note": "zoë <&>"},
			CorrelationID: "corr-" + strconv.Itoa(i), CausationID: "cmd-1", SchemaVersion: "3",
			Headers: map[string]string{outbox.HeaderTraceParent: TraceParent, "tenant": "acme"},
		}
	}
	return msgs
}

// BatchHook is an outbox.HookBatch that counts a relay's outcomes and
// calls its callback, if set, after every batch with the batch's number.
type BatchHook struct {
	Published, Retried, Dead, Batches atomic.Int64
	callback                          atomic.Pointer[func(n int64, info outbox.BatchInfo)]
}

// OnBatch implements outbox.HookBatch.
func (h *BatchHook) OnBatch(_ context.Context, info outbox.BatchInfo) {
	h.Published.Add(int64(info.Published))
	h.Retried.Add(int64(info.Retried))
	h.Dead.Add(int64(info.Dead))
	n := h.Batches.Add(1)
	if f := h.callback.Load(); f != nil {
		(*f)(n, info)
	}
}

// Then makes f the callback, replacing any before it.
func (h *BatchHook) Then(f func(n int64, info outbox.BatchInfo)) { h.callback.Store(&f) }
