package outbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

// TestRelayHeartbeatWithoutTable: a schema without outbox_relays (dropped
// here; a schema before migration 006 alike) turns the heartbeat off with
// a warning, the relay delivers all the same, and Manager.Relays falls
// back to the lease holders.
func TestRelayHeartbeatWithoutTable(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	_, err := b.pool.Exec(b.ctx, `DROP TABLE "`+b.schema+`".outbox_relays`)
	require.NoError(t, err)
	logs := &logBuffer{}
	logs.dumpOnFailure(t)
	rec := outboxtest.NewRecorder()
	b.start(t, outbox.RelayConfig{Sink: rec, HeartbeatInterval: 20 * time.Millisecond, Logger: logs.logger()})
	require.Contains(t, logs.String(), "relay heartbeat off: outbox_relays is missing")

	ids := b.write(t, 3, nil)
	rec.WaitLen(t, len(ids), 20*time.Second)
	b.waitStats(t, "the events marked processed", func(s outbox.Stats) bool { return s.Processed == int64(len(ids)) })
	relays, err := b.mgr.Relays(b.ctx)
	require.NoError(t, err)
	require.Empty(t, relays, "no heartbeat rows and no leases")
	require.Equal(t, 1, strings.Count(logs.String(), "relay heartbeat"), "warned once")
}

// TestRelayHeartbeatOff: a negative interval writes no row.
func TestRelayHeartbeatOff(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	b.start(t, outbox.RelayConfig{Sink: outboxtest.NewRecorder(), HeartbeatInterval: -1})
	relays, err := b.mgr.Relays(b.ctx)
	require.NoError(t, err)
	require.Empty(t, relays)
}

// TestRelayHeartbeatSinkName: the sink's String names it by default, and
// a SinkName that is a URL loses its credentials.
func TestRelayHeartbeatSinkName(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	b.start(t, outbox.RelayConfig{Sink: namedSink{}, RelayID: "named"})
	b.start(t, outbox.RelayConfig{Sink: outboxtest.NewRecorder(), RelayID: "url",
		SinkName: "nats://user:hunter2@nats-1:4222/?token=abc"})
	testutil.WaitFor(t, 10*time.Second, "both relays listed", func() bool {
		relays, err := b.mgr.Relays(b.ctx)
		require.NoError(t, err)
		return len(relays) == 2
	})
	relays, err := b.mgr.Relays(b.ctx)
	require.NoError(t, err)
	require.Equal(t, "named", relays[0].RelayID)
	require.Equal(t, "mysink(broker-1)", relays[0].Sink)
	require.Equal(t, "nats://nats-1:4222/", relays[1].Sink)
}

type namedSink struct{}

func (namedSink) Publish(_ context.Context, events []outbox.Event) []error { return nil }
func (namedSink) String() string                                           { return "mysink(broker-1)" }
