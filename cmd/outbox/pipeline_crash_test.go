package main_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
)

// The relay's pipeline (--max-in-flight) holds several batches at once: a
// kill loses none of them, and a graceful stop settles them all. The relay
// pipelines once a batch was delivered, so the endpoint acknowledges the
// first batch at once and holds the rest.

func TestRelaySIGKILLWithBatchesInFlightLosesNothing(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, testRelaySIGKILLWithBatchesInFlightLosesNothing)
}

func testRelaySIGKILLWithBatchesInFlightLosesNothing(t *testing.T, db []string) {
	b := setup(t)
	const n, batches = 60, 4
	ids := b.writeN(t, n)
	srv := newGateServer(t)
	srv.passAtOnce(ids[:10]...)
	relayArgs := func(id string) []string {
		return append(db, "--schema", b.schema, "relay",
			"--sink", srv.URL, "--relay-id", id, "--batch-size", "10", "--max-in-flight", "4",
			"--sink-concurrency", "40", "--poll-interval", "50ms", "--lease", "3s", "--sink-timeout", "2s",
			"--log-level", "warn")
	}

	// After its first batch, the first relay's one claim loop holds four
	// batches, every event of them sent and none answered, and dies.
	first := start(t, nil, relayArgs("doomed")...)
	srv.waitArrived(t, 10+batches*10)
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	<-first.done
	s := b.stats(t)
	require.EqualValues(t, batches*10, s.Processing, "the killed relay's four batches stay leased")
	require.EqualValues(t, n-10-batches*10, s.Pending, "no fifth batch was claimed")
	require.Len(t, srv.ackedIDs(), 10, "only the first batch was acknowledged before the kill")

	srv.letThrough()
	second := start(t, nil, relayArgs("survivor")...)
	testutil.WaitFor(t, 30*time.Second, "every event processed", func() bool {
		require.False(t, second.exited(), "relay exited; stderr:\n%s", second.stderr.String())
		s := b.stats(t)
		return s.Processed == n && s.Processing == 0 && s.Pending == 0
	})
	acked := srv.ackedIDs()
	for _, id := range ids {
		require.GreaterOrEqual(t, acked[id], 1, "event %d was never delivered", id)
	}
	require.Len(t, acked, n, "no ghost events")
	expired := 0
	for _, id := range ids[10:] {
		e := b.event(t, id)
		require.Equal(t, "survivor", e.LockedBy)
		expired += e.LeaseExpiries
	}
	require.Equal(t, batches*10, expired, "each event of the four killed batches expired once")
	require.Equal(t, 0, second.stop(t, syscall.SIGTERM))
}

func TestRelaySIGTERMSettlesEveryBatchInFlight(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, testRelaySIGTERMSettlesEveryBatchInFlight)
}

func testRelaySIGTERMSettlesEveryBatchInFlight(t *testing.T, db []string) {
	b := setup(t)
	const n, batches = 60, 4
	ids := b.writeN(t, n)
	srv := newGateServer(t)
	srv.passAtOnce(ids[:10]...)
	p := start(t, nil, append(db, "--schema", b.schema, "relay",
		"--sink", srv.URL, "--batch-size", "10", "--max-in-flight", "4", "--sink-concurrency", "40",
		"--poll-interval", "50ms", "--log-level", "warn")...)
	srv.waitArrived(t, 10+batches*10) // the first batch, then four in flight
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	srv.letThrough() // the endpoint answers during the shutdown
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not exit after SIGTERM")
	}
	require.Equal(t, 0, p.cmd.ProcessState.ExitCode(), "stderr:\n%s", p.stderr.String())
	s := b.stats(t)
	require.Zero(t, s.Processing, "every batch in flight was settled")
	// The four batches in flight were delivered and marked. A fifth, if
	// the loop claimed it before it saw the signal, is marked or handed
	// back: nothing is left leased either way.
	require.GreaterOrEqual(t, s.Processed, int64(10+batches*10), "every batch in flight was marked")
	require.EqualValues(t, n, s.Processed+s.Pending)
	require.Len(t, srv.ackedIDs(), int(s.Processed))
}
