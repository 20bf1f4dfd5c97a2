package outbox

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/outboxkit/outbox/internal/circuit"
)

// The sink's circuit breaker. A batch in which no event was delivered and
// some failed with a connection-level error (sinkUnavailable) means the
// sink cannot be reached at all: spending attempts on it would dead-letter
// every event of an outage longer than the retries last. So the relay
// releases those events without spending an attempt, opens the circuit and
// stops claiming; after RelayConfig.ProbeInterval one claim loop probes the
// sink (its HealthChecker, or a trial publish of claimed events), with
// the delay doubling up to ProbeIntervalMax while the probes fail, and the
// loops claim again once one passes. A batch in which some event was
// delivered proves the sink reachable: its failures are the events' own and
// spend attempts as usual.
//
// A trial publishes one event, and every other trial a whole batch: an
// endpoint that drops the connection for one particular event (a payload
// that crashes it) looks unreachable whenever that event is published
// alone, and as the oldest due event it would be every single-event trial,
// keeping the circuit open and every event behind it waiting. In a batch
// the others get through, which closes the circuit and makes that event
// spend its attempts.

// sinkUnavailable reports whether a publish error is a connection-level
// failure that every event would meet: one a sink marked with Unavailable,
// or one the standard library makes while connecting (a refused or failed
// dial, a name that does not resolve, a TLS handshake that failed). A reset
// connection is left to the sinks to mark: only they know whether it came
// before a response.
func sinkUnavailable(err error) bool {
	if err == nil || IsPermanent(err) {
		return false
	}
	return IsUnavailable(err) || circuit.ConnectFailed(err)
}

// sinkDown reports whether a batch's results say the sink is unreachable:
// nothing delivered, and some event failed with a connection-level error.
func sinkDown(errs []error) bool {
	down := false
	for _, err := range errs {
		if err == nil {
			return false
		}
		down = down || sinkUnavailable(err)
	}
	return down
}

// awaitCircuit waits while the sink's circuit is open. It returns probe
// true when the caller is to probe the sink with a trial publish of
// claimed events (the sink has no health check), and ok false when the relay
// is stopping. A sink with a HealthChecker is probed here.
func (r *Relay) awaitCircuit(ctx context.Context) (probe, ok bool) {
	for {
		probe, wait := r.circuit.Acquire()
		if wait == 0 {
			if probe {
				r.startProbe(ctx)
			}
			if !probe || r.health == nil {
				return probe, true
			}
			hctx, cancel := context.WithTimeout(ctx, r.cfg.SinkTimeout)
			err := r.health.Health(hctx)
			cancel()
			if err == nil {
				r.closeCircuit(ctx)
			} else {
				r.probeFailed(ctx, err)
				r.noteProbeFailure(err)
			}
			continue
		}
		changed := r.circuit.Changed()
		t := time.NewTimer(wait)
		select {
		case <-r.stopping:
			t.Stop()
			return false, false
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// settleCircuit moves the circuit after a batch was published: down says
// the sink was unreachable (sinkDown); probe that the batch was a trial
// publish, which the result ends. err is one of the batch's errors, for
// the log and the hooks.
func (r *Relay) settleCircuit(ctx context.Context, probe, down bool, err error) {
	switch {
	case down && probe:
		r.proven.Store(false)
		r.probeFailed(ctx, err)
	case down:
		r.proven.Store(false)
		if r.circuit.Trip() {
			wait := r.circuit.ProbeIn()
			r.log.Warn("sink unreachable: circuit open; the relay stops claiming, releases what it holds without spending an attempt, and probes the sink until it answers",
				slog.String("error", truncate(err.Error())), slog.Duration("probe_in", wait))
			r.runSinkHooks(ctx, CircuitOpen, err)
		}
	case probe:
		r.closeCircuit(ctx)
	}
}

// probeFailed ends a failed probe: the circuit opens again for longer.
func (r *Relay) probeFailed(ctx context.Context, err error) {
	if err == nil {
		err = errNothingToProbe
	}
	wait := r.circuit.ProbeFailed()
	r.log.Debug("sink probe failed; circuit open", slog.String("error", truncate(err.Error())), slog.Duration("probe_in", wait))
	r.runSinkHooks(ctx, CircuitOpen, err)
}

// closeCircuit ends a passing probe: the loops claim again.
func (r *Relay) closeCircuit(ctx context.Context) {
	if _, changed := r.circuit.Reset(); changed {
		r.log.Warn("sink reachable again: circuit closed; claiming resumes")
		r.runSinkHooks(ctx, CircuitClosed, nil)
	}
}

// errNothingToProbe is a probe's result when the claim found no event to
// publish: the sink stays marked unreachable until one comes.
var errNothingToProbe = errors.New("no event to probe the sink with")

// startProbe reports the circuit half-open to the hooks, once a loop has
// become the prober.
func (r *Relay) startProbe(ctx context.Context) {
	r.log.Debug("probing the sink")
	r.runSinkHooks(ctx, CircuitHalfOpen, nil)
}

func (r *Relay) runSinkHooks(ctx context.Context, state CircuitState, err error) {
	s := SinkState{RelayID: r.cfg.RelayID, Circuit: state, Err: err}
	for _, h := range r.sinkHooks {
		r.safeHook(func() { h.OnSinkState(ctx, s) })
	}
}

// circuitState maps the breaker's states to the public ones.
func circuitState(s circuit.State) CircuitState {
	switch s {
	case circuit.Open:
		return CircuitOpen
	case circuit.HalfOpen:
		return CircuitHalfOpen
	}
	return CircuitClosed
}

// resetCircuit starts a run with a closed circuit: a probe the last run
// left half-open has no prober any more.
func (r *Relay) resetCircuit(ctx context.Context) {
	if _, changed := r.circuit.Reset(); changed {
		r.runSinkHooks(ctx, CircuitClosed, nil)
	}
}

// SinkCircuit returns the state of the relay's circuit on its sink:
// CircuitClosed while the sink works.
func (r *Relay) SinkCircuit() CircuitState { return circuitState(r.circuit.State()) }
