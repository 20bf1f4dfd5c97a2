package main_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/pgbouncer"
)

// gateServer is a webhook endpoint that holds requests until opened, and
// records the events it acknowledged with a 2xx.
type gateServer struct {
	*httptest.Server
	mu       sync.Mutex
	open     bool
	opened   chan struct{}
	arrived  chan int64 // every request's ce-id, as it arrives
	acked    map[int64]int
	inFlight int
	pass     map[int64]bool // acknowledged at once, gate or not
}

func newGateServer(t *testing.T) *gateServer {
	t.Helper()
	s := &gateServer{opened: make(chan struct{}), arrived: make(chan int64, 10000), acked: map[int64]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id, err := strconv.ParseInt(r.Header.Get("ce-id"), 10, 64)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		s.arrived <- id
		s.mu.Lock()
		s.inFlight++
		open := s.open || s.pass[id]
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.inFlight--
			s.mu.Unlock()
		}()
		if !open {
			select {
			case <-s.opened:
			case <-r.Context().Done(): // the relay went away or gave up
				return
			}
		}
		s.mu.Lock()
		s.acked[id]++
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	return s
}

// passAtOnce makes the requests for ids succeed at once, before the gate
// opens.
func (s *gateServer) passAtOnce(ids ...int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pass == nil {
		s.pass = map[int64]bool{}
	}
	for _, id := range ids {
		s.pass[id] = true
	}
}

// letThrough makes every held and future request succeed.
func (s *gateServer) letThrough() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.open {
		s.open = true
		close(s.opened)
	}
}

func (s *gateServer) ackedIDs() map[int64]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int64]int, len(s.acked))
	for k, v := range s.acked {
		out[k] = v
	}
	return out
}

// waitArrived waits until n requests have arrived.
func (s *gateServer) waitArrived(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for range n {
		select {
		case <-s.arrived:
		case <-timeout:
			t.Fatalf("fewer than %d webhook requests arrived", n)
		}
	}
}

// forEachDatabase runs test twice, in parallel: with the relay connected to
// PostgreSQL directly, and through a PgBouncer of the test's own in
// transaction mode with the relay in PgBouncer mode (--pgbouncer). db is
// the relay's --database-url and the flags that go with it.
func forEachDatabase(t *testing.T, test func(t *testing.T, db []string)) {
	t.Run("direct", func(t *testing.T) {
		t.Parallel()
		test(t, []string{"--database-url", testutil.DatabaseURL()})
	})
	t.Run("pgbouncer", func(t *testing.T) {
		t.Parallel()
		bouncer := pgbouncer.Start(t, testutil.DatabaseURL(), pgbouncer.Options{})
		test(t, []string{"--database-url", bouncer.URL(t, testutil.DatabaseURL()), "--pgbouncer"})
	})
}

func TestRelaySIGKILLMidBatchLosesNothing(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, testRelaySIGKILLMidBatchLosesNothing)
}

func testRelaySIGKILLMidBatchLosesNothing(t *testing.T, db []string) {
	b := setup(t)
	const n = 40
	ids := b.writeN(t, n)
	srv := newGateServer(t)
	relayArgs := func(id string) []string {
		// One batch in flight: TestRelaySIGKILLWithBatchesInFlightLosesNothing
		// kills a relay holding several.
		return append(db, "--schema", b.schema, "relay",
			"--sink", srv.URL, "--relay-id", id, "--batch-size", "10", "--max-in-flight", "1", "--poll-interval", "50ms",
			"--lease", "3s", "--sink-timeout", "2s", "--log-level", "warn")
	}

	// The first relay claims a batch, sends it, and dies before any answer.
	first := start(t, nil, relayArgs("doomed")...)
	srv.waitArrived(t, 1)
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	<-first.done
	s := b.stats(t)
	require.EqualValues(t, 10, s.Processing, "the killed relay's batch stays leased")
	require.Empty(t, srv.ackedIDs(), "nothing was acknowledged before the kill")

	// Another relay publishes the rest at once and the dead relay's batch
	// once its lease expires.
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
	for i, id := range ids {
		e := b.event(t, id)
		require.Equal(t, "survivor", e.LockedBy)
		if i < 10 {
			// The killed relay's batch: the expiry counts as an attempt.
			require.Equal(t, 1, e.Attempts, "event %d", id)
			require.Equal(t, 1, e.LeaseExpiries, "event %d", id)
		} else {
			require.Zero(t, e.Attempts, "event %d", id)
		}
	}
	require.Equal(t, 0, second.stop(t, syscall.SIGTERM))
}

// An unordered relay on owned partitions (--leases partitions) SIGKILLed
// with four batches sent and none answered: it wrote none of them (they
// stay pending, none processing); another relay takes its partitions over
// once their lease ends, counts one attempt and one lease expiry for each
// event the dead relay had in flight (its in-flight record), and delivers
// everything. Nothing lost, no ghost.
func TestRelayUnorderedPartitionsSIGKILL(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, testRelayUnorderedPartitionsSIGKILL)
}

func testRelayUnorderedPartitionsSIGKILL(t *testing.T, db []string) {
	b := setup(t)
	const batches = 4
	srv := newGateServer(t)
	relayArgs := func(id string) []string {
		return append(db, "--schema", b.schema, "relay", "--leases", "partitions",
			"--sink", srv.URL, "--relay-id", id, "--batch-size", "10", "--max-in-flight", "4",
			"--sink-concurrency", "40", "--poll-interval", "50ms", "--lease", "3s", "--sink-timeout", "2s",
			"--log-level", "warn")
	}
	// A first batch proves the sink (until then a relay keeps one batch in
	// flight); the next 50 events find the endpoint holding every request.
	proof := b.writeN(t, 10)
	srv.passAtOnce(proof...)
	first := start(t, nil, relayArgs("doomed")...)
	testutil.WaitFor(t, 30*time.Second, "the first batch acknowledged", func() bool { return len(srv.ackedIDs()) == len(proof) })
	ids := b.writeN(t, 50)
	inFlight := map[int64]bool{}
	timeout := time.After(30 * time.Second)
	for len(inFlight) < batches*10 {
		select {
		case id := <-srv.arrived:
			if !slices.Contains(proof, id) {
				inFlight[id] = true
			}
		case <-timeout:
			t.Fatalf("%d of %d requests arrived; stderr:\n%s", len(inFlight), batches*10, first.stderr.String())
		}
	}
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	<-first.done
	s := b.stats(t)
	require.EqualValues(t, len(ids), s.Pending, "the killed relay wrote none of its batches")
	require.Zero(t, s.Processing)
	require.Len(t, srv.ackedIDs(), len(proof), "only the first batch was acknowledged before the kill")

	srv.letThrough()
	second := start(t, nil, relayArgs("survivor")...)
	testutil.WaitFor(t, 30*time.Second, "every event processed", func() bool {
		require.False(t, second.exited(), "relay exited; stderr:\n%s", second.stderr.String())
		s := b.stats(t)
		return s.Processed == int64(len(proof)+len(ids)) && s.Pending == 0
	})
	acked := srv.ackedIDs()
	for _, id := range ids {
		require.GreaterOrEqual(t, acked[id], 1, "event %d was never delivered", id)
	}
	require.Len(t, acked, len(proof)+len(ids), "no ghost events")
	for _, id := range ids {
		e := b.event(t, id)
		require.Equal(t, "survivor", e.LockedBy)
		want := 0
		if inFlight[id] {
			want = 1 // in flight when its relay died
		}
		require.Equal(t, want, e.Attempts, "event %d: %s", id, e.LastError)
		require.Equal(t, want, e.LeaseExpiries, "event %d", id)
	}
	require.Equal(t, 0, second.stop(t, syscall.SIGTERM))
}

func TestRelaySIGTERMFinishesInFlightBatch(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, testRelaySIGTERMFinishesInFlightBatch)
}

func testRelaySIGTERMFinishesInFlightBatch(t *testing.T, db []string) {
	b := setup(t)
	const n = 10
	b.writeN(t, n)
	srv := newGateServer(t)
	p := start(t, nil, append(db, "--schema", b.schema, "relay",
		"--sink", srv.URL, "--batch-size", "10", "--poll-interval", "50ms", "--log-level", "warn")...)
	srv.waitArrived(t, n) // the whole batch is in flight
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	srv.letThrough() // the endpoint answers during the shutdown
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not exit after SIGTERM")
	}
	require.Equal(t, 0, p.cmd.ProcessState.ExitCode(), "stderr:\n%s", p.stderr.String())
	s := b.stats(t)
	require.EqualValues(t, n, s.Processed)
	require.Zero(t, s.Processing)
	require.Len(t, srv.ackedIDs(), n)
}

func TestRelaySIGTERMWithStuckSinkExitsWithinLease(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, testRelaySIGTERMWithStuckSinkExitsWithinLease)
}

func testRelaySIGTERMWithStuckSinkExitsWithinLease(t *testing.T, db []string) {
	b := setup(t)
	const n = 10
	ids := b.writeN(t, n)
	srv := newGateServer(t) // never opens: every request hangs
	const lease = 6 * time.Second
	p := start(t, nil, append(db, "--schema", b.schema, "relay",
		"--sink", srv.URL, "--batch-size", "10", "--poll-interval", "50ms", "--lease", lease.String(),
		"--sink-timeout", "5s", "--shutdown-timeout", "1s", "--log-level", "warn")...)
	srv.waitArrived(t, n)
	stopped := time.Now()
	code := p.stop(t, syscall.SIGTERM)
	require.Equal(t, 0, code, "stderr:\n%s", p.stderr.String())
	require.Less(t, time.Since(stopped), lease, "a stopping relay must not hold its lease to the end")
	s := b.stats(t)
	require.Zero(t, s.Processing, "no event is left leased")
	require.EqualValues(t, n, s.Pending)
	for _, id := range ids {
		require.Zero(t, b.event(t, id).Attempts, "released, not failed")
	}
}

func TestRelayBinarySurvivesTerminatedConnections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := newGateServer(t)
	srv.letThrough()
	relayID := "term-" + b.schema[len(b.schema)-8:]
	p := start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", b.schema, "relay",
		"--sink", srv.URL, "--relay-id", relayID, "--batch-size", "5", "--poll-interval", "20ms", "--log-level", "error")
	total := 0
	for range 5 {
		total += len(b.writeN(t, 10))
		testutil.WaitFor(t, 30*time.Second, "batch delivered", func() bool { return len(srv.ackedIDs()) == total })
		var killed int
		err := b.pool.QueryRow(context.Background(),
			`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`,
			"outbox-relay:"+relayID).Scan(&killed)
		require.NoError(t, err)
		require.Positive(t, killed, "the relay's connections carry application_name outbox-relay:<id>")
	}
	total += len(b.writeN(t, 10))
	testutil.WaitFor(t, 30*time.Second, "all processed after the kills", func() bool {
		require.False(t, p.exited(), "relay died with its connections; stderr:\n%s", p.stderr.String())
		return b.stats(t).Processed == int64(total)
	})
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM))
}
