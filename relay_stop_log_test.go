package outbox_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// cancelledSink holds each publish until its context ends, as a sink slower
// than the shutdown timeout does.
type cancelledSink struct {
	started chan struct{}
	once    sync.Once
}

func (s *cancelledSink) Publish(ctx context.Context, events []outbox.Event) []error {
	s.once.Do(func() { close(s.started) })
	<-ctx.Done()
	errs := make([]error, len(events))
	for i := range errs {
		errs[i] = ctx.Err()
	}
	return errs
}

// TestRelayRunLogsReleasesBeforeStopped: when in-flight batches outlive the
// shutdown timeout, the WARN saying they were cancelled and released comes
// before "relay stopped", which is the last line (issue 13 §3).
func TestRelayRunLogsReleasesBeforeStopped(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	b.write(t, 5, nil)
	sink := &cancelledSink{started: make(chan struct{})}
	logs := &logBuffer{}
	logs.dumpOnFailure(t)
	r, err := outbox.NewRelay(b.db, outbox.RelayConfig{Sink: sink, Schema: b.schema, Lease: 20 * time.Second,
		ShutdownTimeout: 200 * time.Millisecond, PollInterval: 20 * time.Millisecond, Logger: logs.logger()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-sink.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay claimed nothing")
	}
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(200*time.Millisecond + outbox.StopGrace + 10*time.Second):
		t.Fatal("Run did not return")
	}

	var msgs []string
	for line := range strings.Lines(logs.String()) {
		_, msg, _ := strings.Cut(line, "msg=")
		msgs = append(msgs, msg)
	}
	released, stopped := -1, -1
	for i, m := range msgs {
		switch {
		case strings.HasPrefix(m, `"in-flight batches outlived the shutdown timeout; they were cancelled and their events released to pending`):
			released = i
		case strings.HasPrefix(m, `"relay stopped"`):
			stopped = i
		}
	}
	require.NotEqual(t, -1, released, "the release is logged")
	require.Equal(t, len(msgs)-1, stopped, `"relay stopped" is the last line`)
	require.Less(t, released, stopped)
	require.Contains(t, msgs[released], "shutdown_timeout=200ms")

	s, err := b.mgr.Stats(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 5, s.Pending, "released to pending")
	require.Zero(t, s.Processing)
}

// TestRelayStopLogsReleasesBeforeStopped: Stop with a context that ends
// first says so before its last line too.
func TestRelayStopLogsReleasesBeforeStopped(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	b.write(t, 3, nil)
	sink := &cancelledSink{started: make(chan struct{})}
	logs := &logBuffer{}
	logs.dumpOnFailure(t)
	r, err := outbox.NewRelay(b.db, outbox.RelayConfig{Sink: sink, Schema: b.schema, Lease: 20 * time.Second,
		PollInterval: 20 * time.Millisecond, Logger: logs.logger()})
	require.NoError(t, err)
	require.NoError(t, r.Start(b.ctx))
	<-sink.started
	ctx, cancel := context.WithTimeout(b.ctx, 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, r.Stop(ctx), context.DeadlineExceeded)
	out := strings.TrimSpace(logs.String())
	last := out[strings.LastIndexByte(out, '\n')+1:]
	require.Contains(t, last, `msg="relay stopped"`)
	require.True(t, logs.hasLine("level=WARN", "in-flight batches outlived the stop's context; they were cancelled"), out)
	require.Less(t, strings.Index(out, "outlived the stop's context"), strings.Index(out, `msg="relay stopped"`))
}
