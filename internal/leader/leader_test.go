package leader_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/leader"
	"github.com/outboxkit/outbox/internal/testutil"
)

// partitionable is a real store that can be cut off: while cut, every call
// fails as a lost connection would, and the row in the database stays as
// it was.
type partitionable struct {
	leader.Store
	cut atomic.Bool
}

var errCut = errors.New("connection lost")

func (p *partitionable) AcquireLease(ctx context.Context, lp driver.LeaseParams) (bool, error) {
	if p.cut.Load() {
		return false, errCut
	}
	return p.Store.AcquireLease(ctx, lp)
}

func (p *partitionable) ReleaseLease(ctx context.Context, name, holder string) error {
	if p.cut.Load() {
		return errCut
	}
	return p.Store.ReleaseLease(ctx, name, holder)
}

type candidate struct {
	el    *leader.Elector
	store *partitionable
	stop  context.CancelFunc
	done  chan struct{}
}

func start(t *testing.T, store leader.Store, holder string, ttl time.Duration, onChange func(bool)) *candidate {
	t.Helper()
	el, err := leader.New(leader.Config{Name: "job", Holder: holder, TTL: ttl,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), OnChange: onChange})
	require.NoError(t, err)
	c := &candidate{el: el, store: &partitionable{Store: store}, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = func() { cancel(); <-c.done }
	go func() {
		defer close(c.done)
		el.Run(ctx, c.store, context.Background())
	}()
	t.Cleanup(c.stop)
	return c
}

func setup(t *testing.T) leader.Store {
	t.Helper()
	pool, schema := testutil.Schema(t)
	return pgdriver.New(pool, schema)
}

func TestOneLeaderThenTakeoverOnStop(t *testing.T) {
	t.Parallel()
	store := setup(t)
	// A 3s lease, renewed every second: at a stop the lease still has at
	// least 2s to run, so a takeover sooner than that came from the release.
	a := start(t, store, "a", 3*time.Second, nil)
	b := start(t, store, "b", 3*time.Second, nil)
	testutil.WaitFor(t, 10*time.Second, "a leader", func() bool {
		require.False(t, a.el.IsLeader() && b.el.IsLeader(), "two leaders")
		return a.el.IsLeader() || b.el.IsLeader()
	})
	lead, other := a, b
	if b.el.IsLeader() {
		lead, other = b, a
	}
	lead.stop()
	require.False(t, lead.el.IsLeader())
	// The stopped elector released the lease: the other takes it at its
	// next try, well before the lease would have expired.
	start := time.Now()
	testutil.WaitFor(t, 10*time.Second, "takeover", other.el.IsLeader)
	require.Less(t, time.Since(start), 2*time.Second, "taken over on release, not on expiry")
}

func TestTakeoverAfterExpiryNeverOverlaps(t *testing.T) {
	t.Parallel()
	store := setup(t)
	var (
		mu        sync.Mutex
		a         *candidate
		overlap   bool
		bGained   = make(chan struct{}, 1)
		aLostSeen atomic.Bool
	)
	a = start(t, store, "a", time.Second, func(l bool) {
		if !l {
			aLostSeen.Store(true)
		}
	})
	testutil.WaitFor(t, 10*time.Second, "a leads", a.el.IsLeader)
	b := start(t, store, "b", time.Second, func(l bool) {
		if l {
			mu.Lock()
			overlap = a.el.IsLeader()
			mu.Unlock()
			bGained <- struct{}{}
		}
	})
	require.False(t, b.el.IsLeader())

	// a loses its connection: it cannot renew, and the row stays a's until
	// it expires by the database clock.
	a.store.cut.Store(true)
	select {
	case <-bGained:
	case <-time.After(10 * time.Second):
		t.Fatal("b never took over the expired lease")
	}
	mu.Lock()
	require.False(t, overlap, "a still believed it led when b took over")
	mu.Unlock()
	require.False(t, a.el.IsLeader())
	testutil.WaitFor(t, 10*time.Second, "a reports the loss", aLostSeen.Load)
}
