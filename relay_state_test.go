package outbox_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
)

func TestRelayRunning(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	sink := newBlockingSink()
	relay, err := outbox.NewRelay(b.db, outbox.RelayConfig{Schema: b.schema, Sink: sink, PollInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.False(t, relay.Running(), "before Start")
	require.NoError(t, relay.Start(b.ctx))
	require.True(t, relay.Running())

	// A batch holds Stop up: the relay is stopping, no longer running.
	b.write(t, 1, nil)
	<-sink.started
	stopped := make(chan error, 1)
	go func() { stopped <- relay.Stop(context.Background()) }()
	testutil.WaitFor(t, 10*time.Second, "Running to turn false while Stop waits for the batch", func() bool {
		return !relay.Running()
	})
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned %v before the batch finished", err)
	default:
	}
	close(sink.release)
	require.NoError(t, <-stopped)
	require.False(t, relay.Running(), "after Stop")
}
