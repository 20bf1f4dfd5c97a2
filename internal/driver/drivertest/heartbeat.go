package drivertest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

// relays reads the heartbeat rows.
func (b bundle) relays(t testing.TB) []driver.RelayRow {
	t.Helper()
	rows, err := b.drv.Relays(b.ctx, true)
	require.NoError(t, err)
	return rows
}

func testHeartbeat(t *testing.T, h Harness) {
	b := setup(t, h)
	proc := driver.RelayProcess{RelayID: "a", Host: "web-1", PID: 4242, Version: "v1.2.3",
		Sink: "natssink(nats://127.0.0.1:4222)", EventTypes: "order.*,invoice.*",
		Delivery: driver.Delivery{Ordering: "aggregate", OrderedFailure: "block", Leases: "rows"}}
	require.NoError(t, b.drv.Heartbeat(b.ctx, driver.Beat{RelayProcess: proc, Start: true, TTL: time.Minute, Forget: time.Hour, WithDelivery: true}))
	rows := b.relays(t)
	require.Len(t, rows, 1)
	first := rows[0]
	require.Equal(t, proc, first.RelayProcess)
	without, err := b.drv.Relays(b.ctx, false)
	require.NoError(t, err)
	require.Zero(t, without[0].Delivery, "read without the delivery columns (a schema before migration 13)")
	require.Equal(t, first.StartedAt, first.LastSeen, "the first beat starts the run")
	require.True(t, first.LastClaim.IsZero(), "no claim yet")
	require.WithinDuration(t, first.Now.Add(time.Minute), first.ExpiresAt, 5*time.Second, "expires_at is now plus the TTL, by the database clock")

	// A later beat keeps started_at and records the last claim.
	claimed := first.Now.Truncate(time.Millisecond)
	require.NoError(t, b.drv.Heartbeat(b.ctx, driver.Beat{RelayProcess: proc, TTL: time.Minute, LastClaim: claimed, Forget: time.Hour}))
	rows = b.relays(t)
	require.Len(t, rows, 1)
	require.Equal(t, first.StartedAt, rows[0].StartedAt)
	require.False(t, rows[0].LastSeen.Before(first.LastSeen))
	require.WithinDuration(t, claimed, rows[0].LastClaim, time.Millisecond)

	// A beat without WithDelivery (a schema before migration 13) leaves
	// the columns alone; a relay that records none reads as zero.
	require.NoError(t, b.drv.Heartbeat(b.ctx, driver.Beat{RelayProcess: driver.RelayProcess{RelayID: "a", Host: "web-1",
		PID: 4242, Version: "v1.2.3", Sink: proc.Sink, EventTypes: proc.EventTypes}, TTL: time.Minute, Forget: time.Hour}))
	require.Equal(t, proc.Delivery, b.relays(t)[0].Delivery)

	// b beats with a short TTL and goes stale by the database clock; a
	// beat of a's that forgets stale rows at once deletes it, never a's own.
	other := proc
	other.RelayID, other.EventTypes, other.Delivery = "b", "", driver.Delivery{}
	require.NoError(t, b.drv.Heartbeat(b.ctx, driver.Beat{RelayProcess: other, Start: true, TTL: 20 * time.Millisecond, Forget: time.Hour}))
	testutil.WaitFor(t, 10*time.Second, "b's row to go stale", func() bool {
		rows := b.relays(t)
		return len(rows) == 2 && rows[1].RelayID == "b" && rows[1].ExpiresAt.Before(rows[1].Now)
	})
	require.NoError(t, b.drv.Heartbeat(b.ctx, driver.Beat{RelayProcess: proc, TTL: time.Minute, Forget: time.Hour}))
	require.Len(t, b.relays(t), 2, "a row stale for less than Forget stays")
	require.NoError(t, b.drv.Heartbeat(b.ctx, driver.Beat{RelayProcess: proc, TTL: time.Minute}))
	rows = b.relays(t)
	require.Len(t, rows, 1, "the stale row is forgotten")
	require.Equal(t, "a", rows[0].RelayID)

	// A new run restarts started_at.
	testutil.WaitFor(t, 10*time.Second, "the database clock to move", func() bool {
		return b.relays(t)[0].Now.After(first.StartedAt)
	})
	require.NoError(t, b.drv.Heartbeat(b.ctx, driver.Beat{RelayProcess: proc, Start: true, TTL: time.Minute, Forget: time.Hour}))
	require.True(t, b.relays(t)[0].StartedAt.After(first.StartedAt))

	require.NoError(t, b.drv.RemoveRelay(b.ctx, "a"))
	require.Empty(t, b.relays(t))
	require.NoError(t, b.drv.RemoveRelay(b.ctx, "a"), "removing a missing row is a no-op")
}

// testRelayHeartbeat runs a relay and watches Manager.Relays: it lists
// the relay while idle, records its claims, and drops it when it stops.
func testRelayHeartbeat(t *testing.T, h Harness) {
	b := setup(t, h)
	rec := outboxtest.NewRecorder()
	r, err := outbox.NewRelay(b.db.Database, outbox.RelayConfig{Schema: b.db.Schema, Sink: rec, RelayID: "idle-relay",
		SinkName: "webhook https://user:s3cret@example.com/hook?token=t0ken", EventTypes: []string{"order.*"},
		PollInterval: 20 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond,
		PgBouncer: h.Pooled, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.NoError(t, r.Start(b.ctx))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = r.Stop(context.Background())
		}
	})

	list := func() []outbox.RelayInfo {
		relays, err := b.mgr.Relays(b.ctx)
		require.NoError(t, err)
		return relays
	}
	relays := list()
	require.Len(t, relays, 1, "a relay that has claimed nothing is listed once Start returns")
	idle := relays[0]
	require.Equal(t, "idle-relay", idle.RelayID)
	require.True(t, idle.Heartbeat)
	require.False(t, idle.Stale)
	require.Zero(t, idle.Lease.Events)
	require.True(t, idle.LastClaim.IsZero())
	require.Equal(t, []string{"order.*"}, idle.EventTypes)
	require.NotEmpty(t, idle.Host)
	require.NotZero(t, idle.PID)
	require.NotEmpty(t, idle.Version)
	require.Equal(t, "webhook https://example.com/hook", idle.Sink, "no credentials in the row")

	b.write(t, outbox.Message{EventType: "order.created", Payload: map[string]int{"n": 1}})
	rec.WaitLen(t, 1, 30*time.Second)
	testutil.WaitFor(t, 30*time.Second, "the last claim in the heartbeat row", func() bool {
		relays := list()
		return len(relays) == 1 && !relays[0].LastClaim.IsZero()
	})
	last := list()[0]
	require.False(t, last.LastClaim.Before(idle.StartedAt), "the claim is timed by the database clock")
	require.False(t, last.LastClaim.After(last.LastSeen))

	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, r.Stop(ctx))
	stopped = true
	require.Empty(t, list(), "a stopped relay is gone when Stop returns")
}

// testRelayDelivery: a relay refuses to start beside a live relay of the
// schema that delivers otherwise (here an unordered relay beside an
// ordered one), and starts once that one stopped.
func testRelayDelivery(t *testing.T, h Harness) {
	if h.NoOrdering != "" {
		t.Skip(h.NoOrdering)
	}
	b := setup(t, h)
	start := func(id string, ordering outbox.Ordering) (*outbox.Relay, error) {
		r, err := outbox.NewRelay(b.db.Database, outbox.RelayConfig{Schema: b.db.Schema, Sink: outboxtest.NewRecorder(),
			RelayID: id, Ordering: ordering, PollInterval: 20 * time.Millisecond, HeartbeatInterval: time.Second,
			PgBouncer: h.Pooled, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		err = r.Start(b.ctx)
		if err == nil {
			t.Cleanup(func() { _ = r.Stop(context.Background()) })
		}
		return r, err
	}
	ordered, err := start("ordered", outbox.OrderingAggregate)
	require.NoError(t, err)
	_, err = start("unordered", outbox.OrderingNone)
	require.ErrorContains(t, err, `relay "ordered" (host `)
	require.ErrorContains(t, err, "delivers with ordering aggregate, ordered failure block")
	require.ErrorContains(t, err, "this relay would deliver with ordering none, leases rows")
	require.Len(t, b.relays(t), 1, "the refused relay left no heartbeat row")

	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, ordered.Stop(ctx))
	_, err = start("unordered", outbox.OrderingNone)
	require.NoError(t, err)
	rows := b.relays(t)
	require.Len(t, rows, 1)
	require.Equal(t, driver.Delivery{Ordering: "none", Leases: "rows"}, rows[0].Delivery)
}

// testRelayDeliveryConcurrentStarts: relays that start at the same moment
// with different deliveries never run side by side: each writes its row
// before it reads the others', so one of two sees the other and refuses,
// and a refused relay leaves no row.
func testRelayDeliveryConcurrentStarts(t *testing.T, h Harness) {
	if h.NoOrdering != "" {
		t.Skip(h.NoOrdering)
	}
	b := setup(t, h)
	ran := 0
	for round := range 8 {
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			started []*outbox.Relay
			modes   = map[outbox.Ordering]int{}
		)
		gate := make(chan struct{})
		for i := range 6 {
			ordering := []outbox.Ordering{outbox.OrderingNone, outbox.OrderingAggregate}[i%2]
			r, err := outbox.NewRelay(b.db.Database, outbox.RelayConfig{Schema: b.db.Schema, Sink: outboxtest.NewRecorder(),
				RelayID: fmt.Sprintf("r%d-%d", round, i), Ordering: ordering, Leases: outbox.LeasesRows, PgBouncer: h.Pooled,
				HeartbeatInterval: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			require.NoError(t, err)
			wg.Go(func() {
				<-gate
				if r.Start(b.ctx) == nil {
					mu.Lock()
					started = append(started, r)
					modes[ordering]++
					mu.Unlock()
				}
			})
		}
		close(gate)
		wg.Wait()
		require.LessOrEqual(t, len(modes), 1, "round %d: relays that deliver otherwise run side by side: %v", round, modes)
		require.Len(t, b.relays(t), len(started), "round %d: a row for each relay that runs, none for a refused one", round)
		ran += len(started)
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		for _, r := range started {
			require.NoError(t, r.Stop(ctx))
		}
		cancel()
	}
	require.Positive(t, ran, "some relays started")
}
