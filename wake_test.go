package outbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

// writeWith commits one event through w.
func writeWith(t *testing.T, b relayBundle, w *outbox.Writer) {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = w.Write(b.ctx, tx, outbox.Message{EventType: "woke", Payload: 1})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
}

func TestRelayListenWakesOnNotify(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	appName := "outbox-relay:" + b.schema
	relayPool := testutil.NewPool(t, appName)
	rec := outboxtest.NewRecorder()
	// Without a wake-up this relay would wait an hour between claims.
	startRelay(t, outbox.Postgres(relayPool), b.schema, outbox.RelayConfig{Sink: rec, Listen: true, PollInterval: time.Hour})
	w := outbox.NewWriter(outbox.WriterConfig{Schema: b.schema, NotifyInterval: time.Nanosecond})

	// The listener claims once when it starts; wait until it is listening.
	testutil.WaitFor(t, 10*time.Second, "relay listening", func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, appName).Scan(&n))
		return n == 1
	})
	for i := range 3 {
		writeWith(t, b, w)
		rec.WaitLen(t, i+1, 10*time.Second)
	}

	// A lost listen connection is re-established.
	_, err := b.pool.Exec(b.ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, appName)
	require.NoError(t, err)
	testutil.WaitFor(t, 10*time.Second, "relay listening again", func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%' AND state = 'idle'`, appName).Scan(&n))
		return n == 1
	})
	writeWith(t, b, w)
	rec.WaitLen(t, 4, 10*time.Second)
}

func TestWriterNotifyIsDebounced(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	conn, err := pgx.Connect(b.ctx, testutil.DatabaseURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(b.ctx, `LISTEN outbox_events`)
	require.NoError(t, err)

	w := outbox.NewWriter(outbox.WriterConfig{Schema: b.schema, NotifyInterval: time.Hour})
	for range 5 {
		writeWith(t, b, w)
	}
	// A writer without an interval never notifies.
	silent := outbox.NewWriter(outbox.WriterConfig{Schema: b.schema})
	writeWith(t, b, silent)

	got := 0
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 500*time.Millisecond)
		n, err := conn.WaitForNotification(ctx)
		cancel()
		if err != nil {
			break
		}
		if n.Payload == b.schema {
			got++
		}
	}
	require.Equal(t, 1, got, "one notification per interval")
	require.EqualValues(t, 6, b.stats(t).Pending)
}

func TestRelayTrailingClaimPicksUpUnnotifiedEvents(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	rec := outboxtest.NewRecorder()
	r := b.start(t, outbox.RelayConfig{Sink: rec, PollInterval: time.Hour})
	// The relay's first claim finds nothing; wake it for the first event
	// only, and write the rest without waking it while it is busy.
	gate := make(chan struct{})
	rec.SetFail(func(outbox.Event) error { <-gate; return nil })
	b.write(t, 1, nil)
	r.Wake()
	b.write(t, 2, nil)
	close(gate)
	rec.WaitLen(t, 3, 10*time.Second)
}

// batchCounter counts the relay's batches.
type batchCounter struct{ n atomic.Int64 }

func (c *batchCounter) OnBatch(context.Context, outbox.BatchInfo) { c.n.Add(1) }

// While events trickle in, the claim loops take turns: the whole relay
// claims about once per trailing delay (5ms), however many loops it runs,
// instead of every loop claiming on its own timer.
func TestRelayLoopsTakeTurnsUnderLightTraffic(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	rec := outboxtest.NewRecorder()
	batches := &batchCounter{}
	r := b.start(t, outbox.RelayConfig{Sink: rec, Workers: 4, PollInterval: time.Hour,
		Hooks: []outbox.Hook{batches}})
	const events = 150
	start := time.Now()
	for range events {
		b.write(t, 1, nil)
		r.Wake()
		time.Sleep(time.Millisecond)
	}
	rec.WaitLen(t, events, 10*time.Second)
	elapsed := time.Since(start)
	// One claim per 5ms at most, plus the claims that wake-ups bring
	// forward after an empty one; four loops on timers of their own would
	// claim nearly once per event.
	limit := int64(elapsed/(5*time.Millisecond)) + 10
	t.Logf("%d events in %v: %d batches", events, elapsed, batches.n.Load())
	require.LessOrEqual(t, batches.n.Load(), min(limit, events*2/3),
		"%d events in %v took %d batches", events, elapsed, batches.n.Load())
}
