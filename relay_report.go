package outbox

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// What a relay says while it works, beyond its per-event logs: a warning,
// at most one per failureWarnInterval, while publishes fail (so a relay
// whose sink fails every event is not silent until events are
// dead-lettered), and an INFO summary of the outcomes every
// RelayConfig.SummaryInterval.

// failureWarnInterval is the least time between two warnings about failing
// publishes.
const failureWarnInterval = 30 * time.Second

// report sums a relay's outcomes for the summary and rate-limits the
// failure warnings.
type report struct {
	mu                                 sync.Mutex
	published, retried, dead, released int
	failed                             int // failed publishes since the last warning
	probes                             int // failed health checks since the last warning
	lastWarn                           time.Time
}

// batch adds a settled batch's outcomes to the summary.
func (p *report) batch(info BatchInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.published += info.Published
	p.retried += info.Retried
	p.dead += info.Dead
	p.released += info.Released
}

// noteFailures records n failed publishes with one of their errors, and
// logs a warning unless one was logged within failureWarnInterval.
func (r *Relay) noteFailures(n int, err error) { r.noteFailed(n, 0, err) }

// noteProbeFailure records a failed health check of the sink, for the same
// warning: while the circuit is open nothing is published, and the
// warning still comes every failureWarnInterval.
func (r *Relay) noteProbeFailure(err error) { r.noteFailed(0, 1, err) }

func (r *Relay) noteFailed(n, probes int, err error) {
	if err == nil {
		return
	}
	p := &r.report
	p.mu.Lock()
	p.failed += n
	p.probes += probes
	now := time.Now()
	if !p.lastWarn.IsZero() && now.Sub(p.lastWarn) < failureWarnInterval {
		p.mu.Unlock()
		return
	}
	failed, probes, since := p.failed, p.probes, p.lastWarn
	p.failed, p.probes, p.lastWarn = 0, 0, now
	p.mu.Unlock()

	attrs := []any{slog.String("sink", sinkName(r.cfg.Sink)), slog.Int("failed", failed)}
	if probes > 0 {
		attrs = append(attrs, slog.Int("failed_health_checks", probes))
	}
	attrs = append(attrs, slog.String("circuit", string(r.SinkCircuit())), slog.String("last_error", truncate(err.Error())))
	if !since.IsZero() {
		attrs = append(attrs, slog.Duration("since", now.Sub(since)))
	}
	r.log.Warn("publishes failing", attrs...)
}

// summaryLoop logs the summary every SummaryInterval until the relay stops.
func (r *Relay) summaryLoop() {
	t := time.NewTicker(r.cfg.SummaryInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stopping:
			return
		case <-t.C:
			r.logSummary()
		}
	}
}

// logSummary logs and resets the outcomes since the last summary; an idle
// interval with a closed circuit logs nothing.
func (r *Relay) logSummary() {
	p := &r.report
	p.mu.Lock()
	published, retried, dead, released := p.published, p.retried, p.dead, p.released
	p.published, p.retried, p.dead, p.released = 0, 0, 0, 0
	p.mu.Unlock()
	state := r.SinkCircuit()
	if published+retried+dead+released == 0 && state == CircuitClosed {
		return
	}
	r.log.Info("relay summary", slog.Duration("interval", r.cfg.SummaryInterval), slog.Int("published", published),
		slog.Int("retried", retried), slog.Int("dead_lettered", dead), slog.Int("released", released),
		slog.String("circuit", string(state)))
}

// sinkName names a sink in the logs: its String method (the sink packages
// name the destination there, without credentials), or its type.
func sinkName(s Sink) string {
	if n, ok := s.(fmt.Stringer); ok {
		return n.String()
	}
	return fmt.Sprintf("%T", s)
}
