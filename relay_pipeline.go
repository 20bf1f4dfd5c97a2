package outbox

import (
	"slices"
	"sync"

	"github.com/outboxkit/outbox/internal/driver"
)

// The relay's pipeline. A claim loop does not wait for its batch to be
// published and marked before it claims the next one: it hands the batch
// to a goroutine of its own and claims again, so the database claims batch
// n+1 and marks batch n-1 while the sink publishes batch n, and a sink that
// keeps a window of unacknowledged messages (NATS, RabbitMQ, MQTT, Redis,
// Kafka) keeps it full across batches. RelayConfig.MaxInFlight bounds the
// batches the relay holds at once and RelayConfig.MaxInFlightBytes their
// bytes.
//
// A loop takes its slot before it claims, not after: a claimed batch is
// published at once and never waits in a queue, so its lease covers one
// claim, one publish and one mark exactly as without the pipeline, and
// every guarantee that rests on the lease (fencing, SinkTimeout and
// DBTimeout shorter than the lease, the ordered mode's local deadline)
// holds unchanged. The ordered mode needs nothing more: its claim skips an
// aggregate while any of its events is processing, so an aggregate is in
// at most one batch in flight, and its next batch is claimed only once the
// earlier one was marked.
//
// Batches go one at a time until one of them delivered an event, at the
// start and again after the sink's circuit opened (Relay.proven): several
// batches in flight against a sink that is down would each fail, and a
// batch whose failures do not look like an outage (a sink's timeout, say)
// while the batch that opens the circuit is still publishing would spend
// attempts on an outage.
//
// A suspect (an event in flight when a relay died: driver.IsolateSuspect,
// or the partition read's cut) is published with nothing else in flight:
// the claim takes it alone, and the pipeline holds no other batch beside
// it, so that if it kills this relay too, the expiry of the leases it
// leaves is charged to it alone and not to the batches that happened to be
// in flight with it. While a suspect's batch is in flight nothing more is
// claimed. A suspect claimed while other batches are in flight goes back
// unpublished, with no attempt spent (errSuspectWaits), and the next claim
// waits until nothing is in flight: it takes the suspect again, alone (a
// released row keeps its place at the head of the claim order; an ordered
// relay on owned partitions reads the suspect's partition alone:
// partitions.readFirst). A loop counts as claiming from the moment it has
// its slot (claiming), waits for the light-traffic turn included, so two
// claim loops never both claim "alone"; with Workers > 1 a suspect is
// therefore often sent back once. A probe's batch is published as it is
// (claimLoop).

// pipeline is the relay's count of batches and bytes in flight.
type pipeline struct {
	slots  chan struct{} // one token per batch the relay may hold
	budget int64         // MaxInFlightBytes

	mu       sync.Mutex
	bytes    int64         // payload and header bytes of the batches held
	busy     int           // batches claimed and not yet settled
	claiming int           // claims under way: slots acquired, no batch held yet
	suspect  bool          // a suspect's batch is in flight
	alone    bool          // a suspect went back: the next claim waits for an empty pipeline
	solo     bool          // the one claim under way was let in on an empty pipeline, to be alone
	settles  int64         // batches settled so far
	onSettle func()        // called at the next settle (wakeOnSettle), nil for none
	changed  chan struct{} // closed and replaced whenever a batch settles or a claim ends
}

func newPipeline(batches, budget int) *pipeline {
	p := &pipeline{slots: make(chan struct{}, batches), budget: int64(budget), changed: make(chan struct{})}
	for range batches {
		p.slots <- struct{}{}
	}
	return p
}

// acquire takes a slot for the next claim, waiting until one is free and
// the bytes held are under the budget. While unproven reports true (the
// sink has not delivered since the relay started or its circuit opened),
// while a suspect is in flight and after one went back, it also waits
// until nothing else is in flight or being claimed. It returns false,
// holding nothing, when stop is closed first.
func (p *pipeline) acquire(stop <-chan struct{}, unproven func() bool) bool {
	select {
	case <-p.slots:
	case <-stop:
		return false
	}
	for {
		p.mu.Lock()
		empty, single := p.busy+p.claiming == 0, p.suspect || p.alone || p.solo || unproven()
		ok, changed := p.bytes < p.budget && (empty || !single), p.changed
		if ok {
			p.claiming++
			p.solo = p.solo || empty && single
		}
		p.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-stop:
			p.slots <- struct{}{}
			return false
		}
	}
}

// settled returns how many held batches have settled so far.
func (p *pipeline) settled() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.settles
}

// wakeOnSettle calls wake once a batch settles after a claim that began
// when settled() was since and found nothing: at once if one settled
// meanwhile, at the next settle if batches are held, never otherwise.
func (p *pipeline) wakeOnSettle(since int64, wake func()) {
	p.mu.Lock()
	now := p.settles != since
	if !now && p.busy > 0 {
		p.onSettle = wake
	}
	p.mu.Unlock()
	if now {
		wake()
	}
}

// giveBack returns a slot whose claim brought no batch.
func (p *pipeline) giveBack() {
	p.mu.Lock()
	p.claimed()
	p.signal()
	p.mu.Unlock()
	p.slots <- struct{}{}
}

// hold records a claimed batch of n bytes in the slot just acquired, and
// reports whether the batch may be published: a batch holding a suspect
// may be only when nothing else is in flight or being claimed; otherwise
// it must go back unpublished, and the next claim waits for an empty
// pipeline. The batch is held either way, until done.
func (p *pipeline) hold(n int64, suspect bool) (publish bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.claimed()
	publish = !suspect || p.busy+p.claiming == 0
	switch {
	case !publish:
		p.alone = true
	case suspect:
		p.suspect = true
	}
	p.bytes += n
	p.busy++
	p.signal() // a claim ended: the ones waiting for a solo claim may go
	return publish
}

// done records that a held batch of n bytes is settled, gives back its
// slot and calls what wakeOnSettle left. A suspect's batch in flight is the
// only batch held, so the pipeline emptying ends it.
func (p *pipeline) done(n int64) {
	p.mu.Lock()
	p.bytes -= n
	p.busy--
	p.suspect = p.suspect && p.busy > 0
	p.settles++
	onSettle := p.onSettle
	p.onSettle = nil
	p.signal()
	p.mu.Unlock()
	p.slots <- struct{}{}
	if onSettle != nil {
		onSettle()
	}
}

// claimed ends a claim under way; the one let in alone satisfies a
// suspect that went back. p.mu is held.
func (p *pipeline) claimed() {
	p.claiming--
	if p.solo {
		p.solo, p.alone = false, false
	}
}

// signal wakes the acquires waiting for a change; p.mu is held.
func (p *pipeline) signal() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// claimBytes is the payload and header bytes of a claimed batch: what it
// keeps in memory until it is settled.
func claimBytes(c driver.Claim) int64 {
	var n int64
	for i := range c.Events {
		n += int64(len(c.Events[i].Payload) + len(c.Events[i].Headers))
	}
	return n
}

// holdsSuspect reports whether a claimed batch holds a suspect.
func holdsSuspect(c driver.Claim) bool {
	return slices.ContainsFunc(c.Events, func(e driver.Event) bool { return e.LeaseExpiries > 0 })
}
