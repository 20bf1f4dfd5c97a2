package main_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
)

// poisonServer is a webhook endpoint that acknowledges every event but one:
// a request for the poison event reports its arrival and hangs, so that the
// test can kill the relay mid-publish, as an out-of-memory kill on a huge
// payload or a fatal error in a handler would.
type poisonServer struct {
	*httptest.Server
	arrived chan struct{} // a request for the poison event arrived
	mu      sync.Mutex
	acked   map[int64]int
}

func newPoisonServer(t *testing.T, poison int64) *poisonServer {
	t.Helper()
	s := &poisonServer{arrived: make(chan struct{}, 100), acked: map[int64]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id, err := strconv.ParseInt(r.Header.Get("ce-id"), 10, 64)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if id == poison {
			s.arrived <- struct{}{}
			<-r.Context().Done() // until the relay is gone
			return
		}
		s.mu.Lock()
		s.acked[id]++
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *poisonServer) ackedIDs() map[int64]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int64]int, len(s.acked))
	for k, v := range s.acked {
		out[k] = v
	}
	return out
}

// TestRelayCrashingEventIsDeadLettered: an event whose publishing kills the
// relay process crash-loops no relay. Each crash leaves its lease to
// expire; the rescue counts the expiry as an attempt, and the event, now a
// suspect, is claimed alone. After --max-attempts expiries it is
// dead-lettered. Its batch-mates from the first crash pay one expiry each,
// are delivered, and none is dead-lettered. The same holds for an ordered
// relay, which owns partitions of keys instead of leasing rows: the lease
// that expires is the partition's, and the relay that takes the partition
// over counts what was recorded in flight on it; a relay restarted under
// the same relay ID, which finds the partitions still its own, counts it
// at its first round.
func TestRelayCrashingEventIsDeadLettered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ordering string
		sameID   bool
	}{{"none", false}, {"aggregate", false}, {"aggregate", true}} {
		t.Run(fmt.Sprintf("ordering=%s/same-id=%v", tc.ordering, tc.sameID), func(t *testing.T) {
			t.Parallel()
			testRelayCrashingEventIsDeadLettered(t, tc.ordering, tc.sameID)
		})
	}
}

func testRelayCrashingEventIsDeadLettered(t *testing.T, ordering string, sameID bool) {
	b := setup(t)
	const n, maxAttempts = 20, 3
	ids := b.writeN(t, n)
	poison := ids[3] // in the first batch, with batch-mates on both sides
	srv := newPoisonServer(t, poison)
	relay := func(i int) *process {
		if sameID {
			i = 0
		}
		return start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", b.schema, "relay",
			"--sink", srv.URL, "--relay-id", fmt.Sprint("relay-", i), "--batch-size", "10", "--poll-interval", "50ms",
			"--lease", "2s", "--sink-timeout", "1s", "--max-attempts", strconv.Itoa(maxAttempts), "--log-level", "warn",
			"--ordering", ordering)
	}

	p := relay(0)
	kills := 0
	deadline := time.Now().Add(2 * time.Minute)
	for b.event(t, poison).Status != outbox.StatusFailed {
		require.True(t, time.Now().Before(deadline), "the poison event was not dead-lettered after %d kills; stderr:\n%s", kills, p.stderr.String())
		select {
		case <-srv.arrived:
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
			<-p.done
			kills++
			require.LessOrEqual(t, kills, maxAttempts, "the poison event was published after it ran out of attempts")
			p = relay(kills)
		case <-time.After(100 * time.Millisecond):
			require.False(t, p.exited(), "relay exited; stderr:\n%s", p.stderr.String())
		}
	}
	require.Equal(t, maxAttempts, kills, "one crash per attempt")

	e := b.event(t, poison)
	require.Equal(t, maxAttempts, e.Attempts)
	require.Equal(t, maxAttempts, e.LeaseExpiries)
	second := "relay-1"
	if sameID {
		second = "relay-0"
	}
	require.Contains(t, e.LastError, "lease expired while held by relay relay-0; lease expired while held by relay "+second+"; ")
	require.Contains(t, e.LastError, fmt.Sprintf("dead-lettered after %d attempts, %d of them ending in a lease expiry", maxAttempts, maxAttempts))

	testutil.WaitFor(t, 60*time.Second, "every other event processed", func() bool {
		require.False(t, p.exited(), "relay exited; stderr:\n%s", p.stderr.String())
		s := b.stats(t)
		return s.Processed == n-1 && s.Pending == 0 && s.Processing == 0
	})
	require.EqualValues(t, 1, b.stats(t).Failed, "only the poison event is dead-lettered")
	acked := srv.ackedIDs()
	for _, id := range ids {
		if id == poison {
			continue
		}
		require.GreaterOrEqual(t, acked[id], 1, "event %d was never delivered", id)
		e := b.event(t, id)
		require.Equal(t, outbox.StatusProcessed, e.Status, "event %d", id)
		require.LessOrEqual(t, e.LeaseExpiries, 1, "event %d paid for the poison event's crashes more than once", id)
		require.Equal(t, e.LeaseExpiries, e.Attempts, "event %d", id)
	}
	// The relay that dead-lettered it says so.
	require.Contains(t, p.stderr.String(), "event dead-lettered")
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM))
}
