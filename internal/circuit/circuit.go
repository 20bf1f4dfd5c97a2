// Package circuit is the relay's circuit breaker on its sink: the state
// machine that decides when the relay stops claiming because the sink is
// unreachable, when it probes the sink again, and when it resumes.
//
// A closed circuit lets every claim loop claim. A connection-level failure
// (Trip) opens it: the loops stop claiming, and after a probe delay one of
// them (the one Acquire makes the prober) tests the sink while the circuit
// is half-open. A passing probe (Reset) closes the circuit; a failing one
// (ProbeFailed) opens it again with the delay doubled, up to a cap. Only the
// prober moves a half-open circuit: batches that were already publishing
// when the circuit opened neither close it nor lengthen the delay.
package circuit

import (
	"sync"
	"time"

	"github.com/outboxkit/outbox/internal/backoff"
)

// State is a circuit's state.
type State int

// States.
const (
	// Closed: the sink works; the relay claims.
	Closed State = iota
	// Open: the sink is unreachable; the relay claims nothing until the
	// next probe is due.
	Open
	// HalfOpen: one probe of the sink is under way.
	HalfOpen
)

// String returns closed, open or half-open.
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return "unknown"
}

// Breaker is one sink's circuit. It is safe for concurrent use.
type Breaker struct {
	base, max time.Duration
	now       func() time.Time

	mu      sync.Mutex
	state   State
	failed  int       // probes failed since the circuit opened
	next    time.Time // when the next probe is due, while open
	changed chan struct{}
}

// New returns a closed breaker whose first probe comes base after it opens
// and whose later probes back off exponentially (with jitter) up to max.
func New(base, maxDelay time.Duration) *Breaker {
	return &Breaker{base: base, max: maxDelay, now: time.Now, changed: make(chan struct{})}
}

// State returns the current state.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// ProbeIn returns how long until the next probe is due while the circuit
// is open, and 0 otherwise. Unlike Acquire it changes nothing.
func (b *Breaker) ProbeIn() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != Open {
		return 0
	}
	return max(b.next.Sub(b.now()), 0)
}

// Changed returns a channel closed at the next state change.
func (b *Breaker) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// Acquire says what a claim loop may do now. On a closed circuit it returns
// (false, 0): claim. On an open circuit whose probe is due it moves the
// circuit to half-open and returns (true, 0): the caller is the prober and
// must end the probe with Reset or ProbeFailed. Otherwise it returns
// (false, wait) with wait > 0: wait that long, or until Changed, and ask
// again.
func (b *Breaker) Acquire() (probe bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case Closed:
		return false, 0
	case Open:
		if d := b.next.Sub(b.now()); d > 0 {
			return false, d
		}
		b.set(HalfOpen)
		return true, 0
	}
	// Half-open: another loop probes. Its probe ends with a state change,
	// which Changed announces; the wait is only a backstop.
	return false, b.base
}

// Trip records a connection-level failure outside a probe. It opens a
// closed circuit, with the first probe due after the base delay, and
// reports whether it did; an open or half-open circuit is left alone.
func (b *Breaker) Trip() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != Closed {
		return false
	}
	b.failed = 0
	b.next = b.now().Add(backoff.Exponential(0, b.base, b.max))
	b.set(Open)
	return true
}

// ProbeFailed ends a failed probe: the circuit opens again and the next
// probe is due after twice the last delay, at most the cap. It returns that
// delay. It does nothing unless the circuit is half-open.
func (b *Breaker) ProbeFailed() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != HalfOpen {
		return 0
	}
	b.failed++
	d := backoff.Exponential(b.failed, b.base, b.max)
	b.next = b.now().Add(d)
	b.set(Open)
	return d
}

// Reset closes the circuit and reports the state it left; changed is false
// when it was closed already.
func (b *Breaker) Reset() (from State, changed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	from = b.state
	if from == Closed {
		return from, false
	}
	b.failed = 0
	b.set(Closed)
	return from, true
}

// set moves to s and wakes the waiters; b.mu is held.
func (b *Breaker) set(s State) {
	if s == b.state {
		return
	}
	b.state = s
	close(b.changed)
	b.changed = make(chan struct{})
}
