package outbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// acquireAsync starts an acquire and returns a channel that receives once
// it got its slot.
func acquireAsync(p *pipeline, stop <-chan struct{}) <-chan bool {
	got := make(chan bool, 1)
	go func() { got <- p.acquire(stop, never) }()
	return got
}

func requireWaiting(t *testing.T, got <-chan bool, why string) {
	t.Helper()
	select {
	case <-got:
		t.Fatal(why)
	case <-time.After(50 * time.Millisecond):
	}
}

func requireAcquired(t *testing.T, got <-chan bool, why string) {
	t.Helper()
	select {
	case ok := <-got:
		require.True(t, ok, why)
	case <-time.After(5 * time.Second):
		t.Fatal(why)
	}
}

// never is an alone func for a relay whose sink is proven.
func never() bool { return false }

// testPipeline returns a pipeline of four batches and the stop channel for
// its acquires, closed when the test ends.
func testPipeline(t *testing.T) (*pipeline, chan struct{}) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	return newPipeline(4, 1<<20), stop
}

// The pipeline lets a suspect's batch publish only with nothing else in
// flight or being claimed, holds every claim while it is in flight, sends
// one claimed beside other batches back and lets the next claim in only
// once the pipeline is empty, and that claim alone.
func TestPipelineIsolatesSuspects(t *testing.T) {
	t.Parallel()
	p, stop := testPipeline(t)

	// A batch in flight, then a suspect claimed beside it: sent back.
	require.True(t, p.acquire(stop, never))
	require.True(t, p.hold(10, false))
	require.True(t, p.acquire(stop, never))
	require.False(t, p.hold(1, true), "a suspect beside a batch in flight is sent back")

	// The next claim waits until both settled.
	next := acquireAsync(p, stop)
	requireWaiting(t, next, "claimed beside the batch that went back")
	p.done(1)
	requireWaiting(t, next, "claimed beside a batch in flight")
	p.done(10)
	requireAcquired(t, next, "the pipeline emptied and no claim went in")

	// That claim is alone: another waits until it holds its batch.
	other := acquireAsync(p, stop)
	requireWaiting(t, other, "a claim went in beside the one claiming alone")
	require.True(t, p.hold(1, true), "the suspect claimed alone is published")

	// While the suspect is in flight nothing is claimed: neither the claim
	// that waited (hold woke it) nor a new one.
	fresh := acquireAsync(p, stop)
	requireWaiting(t, other, "a claim went in beside a suspect in flight")
	requireWaiting(t, fresh, "a new claim went in beside a suspect in flight")
	p.done(1)
	requireAcquired(t, other, "the suspect settled and no claim went in")
	requireAcquired(t, fresh, "the suspect settled and no new claim went in")
	require.True(t, p.hold(10, false))
	p.giveBack()

	// An ordinary batch claimed beside others is published; so is a claim
	// under way with batches in flight.
	require.True(t, p.acquire(stop, never))
	p.giveBack()
	require.True(t, p.acquire(stop, never))
	require.True(t, p.hold(10, false))
	p.done(10)
	p.done(10)
}

// A suspect claimed while another claim is under way (a second claim
// loop) is sent back too: that claim may bring a batch that would be in
// flight beside it.
func TestPipelineSendsBackASuspectBesideAClaim(t *testing.T) {
	t.Parallel()
	p, stop := testPipeline(t)
	require.True(t, p.acquire(stop, never))
	require.True(t, p.acquire(stop, never))
	require.False(t, p.hold(1, true))
	p.giveBack()
	p.done(1)
	require.True(t, p.acquire(stop, never))
	require.True(t, p.hold(1, true), "claimed again with nothing else in flight")
	p.done(1)
}
