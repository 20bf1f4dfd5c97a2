package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/errtext"
)

// HeartbeatIntervalDefault is how often a relay renews its row in
// outbox_relays (RelayConfig.HeartbeatInterval).
const HeartbeatIntervalDefault = 15 * time.Second

// The heartbeat's rule for stale rows: a row whose relay has not renewed
// it for heartbeatStaleBeats intervals is stale (the relay was killed,
// hangs, or lost the database); a row stale for heartbeatForget is deleted
// by the next heartbeat of any relay on the schema.
const (
	heartbeatStaleBeats = 3
	heartbeatForget     = time.Hour
)

// Bounds of the heartbeat row's text columns (MySQL's VARCHAR sizes).
const (
	heartbeatTextMax       = 255
	heartbeatSinkMax       = 1024
	heartbeatEventTypesMax = 4096
)

// heartbeat is the relay's row in outbox_relays (relay_heartbeat.go).
type heartbeat struct {
	proc driver.RelayProcess
	// mu guards the fields below; the claim loops set lastClaim.
	mu      sync.Mutex
	on      bool      // the schema has outbox_relays
	started bool      // the run's first beat landed (it sets started_at)
	last    time.Time // the last beat, by the local clock, for its cadence
	fails   int
	// lastClaim is the database time of the last claim that leased
	// events (the lease's end less the lease); zero for none in this run.
	lastClaim time.Time
}

// relayProcess describes this relay for its heartbeat row.
func (c RelayConfig) relayProcess() driver.RelayProcess {
	host, _ := os.Hostname()
	return driver.RelayProcess{
		RelayID:    c.RelayID,
		Host:       errtext.Sanitize(host, heartbeatTextMax),
		PID:        os.Getpid(),
		Version:    errtext.Sanitize(cmp.Or(c.Version, moduleVersion()), heartbeatTextMax),
		Sink:       errtext.Sanitize(redactSinkName(c.sinkName()), heartbeatSinkMax),
		EventTypes: errtext.Sanitize(strings.Join(c.EventTypes, ","), heartbeatEventTypesMax),
	}
}

// sinkName is SinkName, or the sink's String when it has one (every sink
// of this module names its endpoint there, without credentials), or its
// type.
func (c RelayConfig) sinkName() string {
	if c.SinkName != "" {
		return c.SinkName
	}
	if s, ok := c.Sink.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", c.Sink)
}

// redactSinkName removes what may hold a credential from a sink name that
// is a URL or holds one: the user information and the query. SinkName is
// documented to hold none; this keeps a careless one out of the table.
func redactSinkName(s string) string {
	var b strings.Builder
	for i, word := range strings.Fields(s) {
		if i > 0 {
			b.WriteByte(' ')
		}
		if u, err := url.Parse(strings.Trim(word, "()")); err == nil && u.Scheme != "" && (u.User != nil || u.RawQuery != "") {
			u.User, u.RawQuery = nil, ""
			word = strings.Replace(word, strings.Trim(word, "()"), u.String(), 1)
		}
		b.WriteString(word)
	}
	return b.String()
}

// moduleVersion is the outbox module's version in the program's build
// information: the main module's when the program is this module (a
// checkout builds "(devel)"), else the dependency's.
var moduleVersion = sync.OnceValue(func() string {
	const path = "github.com/outboxkit/outbox"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	if bi.Main.Path == path {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "(unknown)"
})

// heartbeatTTL is how long a row stays fresh after a beat.
func (c RelayConfig) heartbeatTTL() time.Duration { return heartbeatStaleBeats * c.HeartbeatInterval }

// startHeartbeat decides whether the relay keeps a heartbeat row and
// writes the run's first beat, for Start. A schema before migration 6
// turns it off with a warning: the relay works without it, but the
// dashboard lists it only while it holds leases.
func (r *Relay) startHeartbeat(ctx context.Context, version func() (int, error)) {
	hb := &r.heartbeat
	hb.mu.Lock()
	hb.on, hb.started, hb.last, hb.fails, hb.lastClaim = false, false, time.Time{}, 0, time.Time{}
	hb.mu.Unlock()
	if r.cfg.HeartbeatInterval < 0 {
		return
	}
	v, err := version()
	if err == nil && v > 0 && v < driver.HeartbeatVersion {
		r.log.Warn("relay heartbeat off: the schema lacks outbox_relays, so the dashboard lists this relay only while it holds leases; run outbox migrate",
			slog.Int("schema_version", v), slog.Int("heartbeat_version", driver.HeartbeatVersion))
		return
	}
	hb.mu.Lock()
	hb.on = true
	hb.mu.Unlock()
	r.beat(ctx)
}

// heartbeatDue reports whether the heartbeat is on and its interval has
// passed, less half of tick, the loop's period, so that a beat never
// waits a whole extra tick for a few microseconds.
func (r *Relay) heartbeatDue(tick time.Duration) bool {
	hb := &r.heartbeat
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.on && time.Since(hb.last) >= r.cfg.HeartbeatInterval-tick/2
}

// beat writes the relay's heartbeat row, within DBTimeout. A failure is
// logged, rate-limited, and retried at the next beat; a missing table
// turns the heartbeat off.
func (r *Relay) beat(ctx context.Context) {
	hb := &r.heartbeat
	hb.mu.Lock()
	b := driver.Beat{RelayProcess: hb.proc, Start: !hb.started, TTL: r.cfg.heartbeatTTL(),
		LastClaim: hb.lastClaim, Forget: heartbeatForget}
	hb.last = time.Now()
	hb.mu.Unlock()
	bctx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	err := r.drv.Heartbeat(bctx, b)
	cancel()
	hb.mu.Lock()
	defer hb.mu.Unlock()
	switch {
	case err == nil:
		if hb.fails > 0 {
			r.log.Info("relay heartbeat resumed", slog.Int("failed_beats", hb.fails))
		}
		hb.started, hb.fails = true, 0
	case errors.Is(err, driver.ErrNoTable):
		hb.on = false
		r.log.Warn("relay heartbeat off: outbox_relays is missing, so the dashboard lists this relay only while it holds leases; run outbox migrate",
			slog.String("error", err.Error()))
	case ctx.Err() != nil:
	default:
		hb.fails++
		if hb.fails == 1 || hb.fails%20 == 0 {
			r.log.Warn("relay heartbeat failed; the relay keeps working, and shows as stale once its row expires",
				slog.Int("failed_beats", hb.fails), slog.Duration("retry_in", r.cfg.HeartbeatInterval), slog.String("error", err.Error()))
		}
	}
}

// noteClaim records when a claim that leased events ran, by the database
// clock: the lease's end less its length.
func (r *Relay) noteClaim(c driver.Claim) {
	if c.LockedUntil.IsZero() {
		return
	}
	lease := r.cfg.Lease
	if c.Lease > 0 {
		lease = c.Lease
	}
	at := c.LockedUntil.Add(-lease)
	hb := &r.heartbeat
	hb.mu.Lock()
	if at.After(hb.lastClaim) {
		hb.lastClaim = at
	}
	hb.mu.Unlock()
}

// removeHeartbeat deletes the relay's row once it stopped, within
// DBTimeout of ctx (the settling context, which a stop that gives up
// cancels: the row then goes stale instead).
func (r *Relay) removeHeartbeat(ctx context.Context) {
	hb := &r.heartbeat
	hb.mu.Lock()
	on := hb.on
	hb.on = false
	hb.mu.Unlock()
	if !on {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	defer cancel()
	if err := r.drv.RemoveRelay(rctx, r.cfg.RelayID); err != nil && ctx.Err() == nil {
		r.log.Warn("removing the relay's heartbeat row failed; it shows as stale until it expires",
			slog.String("error", err.Error()))
	}
}
