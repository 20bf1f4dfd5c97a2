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

// pipeline is the relay's count of batches and bytes in flight.
type pipeline struct {
	slots  chan struct{} // one token per batch the relay may hold
	budget int64         // MaxInFlightBytes

	mu    sync.Mutex
	bytes int64         // payload and header bytes of the batches held
	freed chan struct{} // closed and replaced whenever bytes go down
}

func newPipeline(batches, budget int) *pipeline {
	p := &pipeline{slots: make(chan struct{}, batches), budget: int64(budget), freed: make(chan struct{})}
	for range batches {
		p.slots <- struct{}{}
	}
	return p
}

// acquire takes a slot for the next claim, waiting until one is free and
// the bytes held are under the budget. It returns false, holding nothing,
// when stop is closed first.
func (p *pipeline) acquire(stop <-chan struct{}) bool {
	select {
	case <-p.slots:
	case <-stop:
		return false
	}
	for {
		p.mu.Lock()
		under, freed := p.bytes < p.budget, p.freed
		p.mu.Unlock()
		if under {
			return true
		}
		select {
		case <-freed:
		case <-stop:
			p.slots <- struct{}{}
			return false
		}
	}
}

// hold adds a claimed batch's bytes to what the pipeline holds.
func (p *pipeline) hold(n int64) {
	p.mu.Lock()
	p.bytes += n
	p.mu.Unlock()
}

// done gives back a slot and the n bytes its batch held.
func (p *pipeline) done(n int64) {
	if n > 0 {
		p.mu.Lock()
		p.bytes -= n
		close(p.freed)
		p.freed = make(chan struct{})
		p.mu.Unlock()
	}
	p.slots <- struct{}{}
}

// held reports the bytes and batches in flight.
func (p *pipeline) held() (bytes int64, batches int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bytes, cap(p.slots) - len(p.slots)
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
