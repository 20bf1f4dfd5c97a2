package outbox

import (
	"context"
	"time"
)

// Hook observes a relay. A hook implements one or more of the Hook…
// interfaces; RelayConfig.Hooks takes any mix of them.
type Hook any

// HookBatch is called after every claimed batch is settled, on the relay
// goroutine that handled it: keep it fast. Batches in flight settle
// concurrently (RelayConfig.MaxInFlight), so OnBatch must be safe for
// concurrent use.
type HookBatch interface {
	OnBatch(ctx context.Context, b BatchInfo)
}

// HookDeadLetter is called for every event the relay dead-letters (moves to
// failed), after the move has committed.
type HookDeadLetter interface {
	OnDeadLetter(ctx context.Context, event Event, err error)
}

// HookPublish is called for each event just before the sink publishes it,
// and the function it returns (if not nil) with the event's result. It may
// change e.Headers — the sink sees the change and the stored row does not —
// which is how a tracing hook hands the sink the context of a publish span.
type HookPublish interface {
	OnPublish(ctx context.Context, e *Event) (done func(err error))
}

// HookRescue is called after each lease rescue that found expired leases:
// events whose relay died or hung while it held them, perhaps because
// publishing one of them kills the process. The dead-letter hooks run for
// each event in Dead as well.
type HookRescue interface {
	OnRescue(ctx context.Context, r RescueInfo)
}

// HookSinkState is called when the relay's circuit on its sink changes
// state: CircuitOpen when the sink became unreachable (and after each failed
// probe), CircuitHalfOpen when a probe starts, CircuitClosed when one
// passed. outboxprom turns it into outbox_sink_up and
// outbox_sink_circuit_state.
type HookSinkState interface {
	OnSinkState(ctx context.Context, s SinkState)
}

// CircuitState is the state of a relay's circuit on its sink.
type CircuitState string

// Circuit states.
const (
	// CircuitClosed: the sink works; the relay claims and publishes.
	CircuitClosed CircuitState = "closed"
	// CircuitOpen: the sink is unreachable; the relay claims nothing until
	// its next probe.
	CircuitOpen CircuitState = "open"
	// CircuitHalfOpen: the relay is probing the sink.
	CircuitHalfOpen CircuitState = "half-open"
)

// SinkState is a change of a relay's circuit on its sink.
type SinkState struct {
	RelayID string
	Circuit CircuitState
	// Err is the connection-level error that opened the circuit or failed
	// the probe; nil otherwise.
	Err error
}

// Up reports whether the sink is taken to be reachable: the circuit is
// closed.
func (s SinkState) Up() bool { return s.Circuit == CircuitClosed }

// RescueInfo describes one lease rescue.
type RescueInfo struct {
	// RelayID is the rescuing relay's ID (not the one that held the leases:
	// that is in each event's last error).
	RelayID string
	// Rescued are the IDs of the events returned to pending; each is
	// claimed alone from now on.
	Rescued []int64
	// Dead are the events that ran out of attempts with this expiry and
	// were dead-lettered.
	Dead []Event
}

// BatchInfo describes one claimed batch after it was settled.
type BatchInfo struct {
	RelayID string
	// Events are the claimed events and Errors their publish results, in
	// the same order (nil for delivered).
	Events []Event
	Errors []error
	// Published, Retried, Dead and Released count the outcomes that
	// committed; an outcome whose mark lost its lease is in none of them.
	Published, Retried, Dead, Released int
	// ClaimDuration, PublishDuration and MarkDuration time the three steps.
	ClaimDuration   time.Duration
	PublishDuration time.Duration
	MarkDuration    time.Duration
	// PublishedAt is when the sink returned, by the relay host's clock.
	PublishedAt time.Time
}
