package outbox

import (
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

// pipeline is the relay's count of batches and bytes in flight.
type pipeline struct {
	slots  chan struct{} // one token per batch the relay may hold
	budget int64         // MaxInFlightBytes

	mu      sync.Mutex
	bytes   int64         // payload and header bytes of the batches held
	busy    int           // batches claimed and not yet settled
	changed chan struct{} // closed and replaced whenever a batch settles
}

func newPipeline(batches, budget int) *pipeline {
	p := &pipeline{slots: make(chan struct{}, batches), budget: int64(budget), changed: make(chan struct{})}
	for range batches {
		p.slots <- struct{}{}
	}
	return p
}

// acquire takes a slot for the next claim, waiting until one is free and
// the bytes held are under the budget, and, while alone reports true, until
// no other batch is in flight. It returns false, holding nothing, when stop
// is closed first.
func (p *pipeline) acquire(stop <-chan struct{}, alone func() bool) bool {
	select {
	case <-p.slots:
	case <-stop:
		return false
	}
	for {
		p.mu.Lock()
		ok, changed := p.bytes < p.budget && (p.busy == 0 || !alone()), p.changed
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

// giveBack returns a slot whose claim brought no batch.
func (p *pipeline) giveBack() { p.slots <- struct{}{} }

// hold records a claimed batch of n bytes in the slot just acquired.
func (p *pipeline) hold(n int64) {
	p.mu.Lock()
	p.bytes += n
	p.busy++
	p.mu.Unlock()
}

// done records that a held batch of n bytes is settled, and gives back its
// slot.
func (p *pipeline) done(n int64) {
	p.mu.Lock()
	p.bytes -= n
	p.busy--
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	p.slots <- struct{}{}
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
