package circuit

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/backoff"
)

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func setup(base, maxDelay time.Duration) (*Breaker, *clock) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	b := New(base, maxDelay)
	b.now = c.now
	return b, c
}

func TestClosedCircuitLetsEveryoneClaim(t *testing.T) {
	t.Parallel()
	b, _ := setup(time.Second, 30*time.Second)
	require.Equal(t, Closed, b.State())
	for range 3 {
		probe, wait := b.Acquire()
		require.False(t, probe)
		require.Zero(t, wait)
	}
	from, changed := b.Reset()
	require.Equal(t, Closed, from)
	require.False(t, changed, "closing a closed circuit is no state change")
}

func TestTripOpensAndOneProberIsChosenWhenDue(t *testing.T) {
	t.Parallel()
	b, c := setup(time.Second, 30*time.Second)
	changed := b.Changed()
	require.True(t, b.Trip())
	require.Equal(t, Open, b.State())
	select {
	case <-changed:
	default:
		t.Fatal("Changed was not closed when the circuit opened")
	}
	require.False(t, b.Trip(), "a second trip of an open circuit is no state change")

	require.Equal(t, b.ProbeIn(), func() time.Duration { _, w := b.Acquire(); return w }())
	probe, wait := b.Acquire()
	require.False(t, probe)
	require.Greater(t, wait, time.Duration(0))
	require.LessOrEqual(t, wait, time.Second)

	c.advance(time.Second)
	require.Zero(t, b.ProbeIn(), "due")
	require.Equal(t, Open, b.State(), "ProbeIn changes nothing")
	probe, wait = b.Acquire()
	require.True(t, probe, "the probe is due")
	require.Zero(t, wait)
	require.Equal(t, HalfOpen, b.State())
	probe, wait = b.Acquire()
	require.False(t, probe, "only one loop probes at a time")
	require.Greater(t, wait, time.Duration(0))
	require.False(t, b.Trip(), "a batch failing during the probe does not move the circuit")
	require.Equal(t, HalfOpen, b.State())
}

func TestFailedProbesBackOffUpToTheCap(t *testing.T) {
	t.Parallel()
	b, c := setup(time.Second, 8*time.Second)
	require.True(t, b.Trip())
	c.advance(time.Second)
	for i := 1; i <= 6; i++ {
		probe, _ := b.Acquire()
		require.True(t, probe, "probe %d", i)
		d := b.ProbeFailed()
		want := backoff.Uncapped(i, time.Second, 8*time.Second)
		require.LessOrEqual(t, d, want, "probe %d", i)
		require.GreaterOrEqual(t, d, time.Duration(float64(want)*(1-backoff.Jitter)), "probe %d", i)
		require.Equal(t, Open, b.State())
		probe, wait := b.Acquire()
		require.False(t, probe)
		require.Equal(t, d, wait)
		c.advance(d)
	}
}

func TestPassingProbeClosesAndRestartsTheBackoff(t *testing.T) {
	t.Parallel()
	b, c := setup(time.Second, time.Minute)
	require.True(t, b.Trip())
	c.advance(time.Second)
	probe, _ := b.Acquire()
	require.True(t, probe)
	b.ProbeFailed()
	c.advance(time.Minute)
	probe, _ = b.Acquire()
	require.True(t, probe)
	from, changed := b.Reset()
	require.Equal(t, HalfOpen, from)
	require.True(t, changed)
	require.Equal(t, Closed, b.State())

	// The next outage starts from the base delay again.
	require.True(t, b.Trip())
	_, wait := b.Acquire()
	require.LessOrEqual(t, wait, time.Second)
}

func TestProbeFailedOutsideAProbeIsIgnored(t *testing.T) {
	t.Parallel()
	b, _ := setup(time.Second, time.Minute)
	require.Zero(t, b.ProbeFailed())
	require.Equal(t, Closed, b.State())
	require.True(t, b.Trip())
	require.Zero(t, b.ProbeFailed())
	require.Equal(t, Open, b.State())
}

func TestConcurrentAcquireChoosesOneProber(t *testing.T) {
	t.Parallel()
	b, c := setup(time.Millisecond, time.Second)
	require.True(t, b.Trip())
	c.advance(time.Millisecond)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		probes int
	)
	for range 16 {
		wg.Go(func() {
			if probe, _ := b.Acquire(); probe {
				mu.Lock()
				probes++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, 1, probes)
}

func TestStateNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, "closed", Closed.String())
	require.Equal(t, "open", Open.String())
	require.Equal(t, "half-open", HalfOpen.String())
}
