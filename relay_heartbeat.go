package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
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
	// withDelivery: the schema records how relays deliver
	// (driver.DeliveryVersion); each beat writes proc.Delivery and
	// checks the others' (checkDelivery). rivals are the relays last
	// found delivering otherwise, each logged once.
	withDelivery bool
	rivals       map[string]bool
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

// startHeartbeat decides whether the relay keeps a heartbeat row, writes
// the run's first beat, and then checks, for Start, how the other relays
// of the schema deliver (checkDelivery). A schema before migration 6 turns
// the heartbeat off with a warning: the relay works without it, but the
// dashboard lists it only while it holds leases.
func (r *Relay) startHeartbeat(ctx context.Context, version func() (int, error)) error {
	hb := &r.heartbeat
	v, err := version()
	if err != nil {
		// The relay runs as before, unchecked: the heartbeat stays on,
		// without the delivery.
		r.log.Warn("the relay does not record or check how the relays of its schema deliver: reading the schema version failed (a role without SELECT on outbox_migrations needs it granted)",
			slog.String("schema", r.cfg.Schema), slog.String("error", err.Error()))
	}
	withDelivery := err == nil && v >= driver.DeliveryVersion
	hb.mu.Lock()
	hb.on, hb.started, hb.last, hb.fails, hb.lastClaim = false, false, time.Time{}, 0, time.Time{}
	hb.proc.Delivery = r.delivery()
	hb.withDelivery, hb.rivals = withDelivery, nil
	hb.mu.Unlock()
	if r.cfg.HeartbeatInterval >= 0 {
		if err == nil && v > 0 && v < driver.HeartbeatVersion {
			r.log.Warn("relay heartbeat off: the schema lacks outbox_relays, so the dashboard lists this relay only while it holds leases; run outbox migrate",
				slog.Int("schema_version", v), slog.Int("heartbeat_version", driver.HeartbeatVersion))
			return nil
		}
		hb.mu.Lock()
		hb.on = true
		hb.mu.Unlock()
		if err := r.startBeat(ctx, withDelivery); err != nil {
			return err
		}
	}
	if !withDelivery {
		return nil
	}
	return r.checkDelivery(ctx)
}

// startBeatTries is how many times Start writes the run's first beat, a
// moment apart, before it gives up, when the row records the delivery.
const startBeatTries = 3

// startBeat writes the run's first beat. Without the delivery it is a
// beat like the others: a failure is logged and the next beat tries
// again. With it the row is what shows the other relays how this one
// delivers, so it must land before the check reads theirs: Start tries a
// few times, then fails.
func (r *Relay) startBeat(ctx context.Context, withDelivery bool) error {
	if !withDelivery {
		_ = r.beat(ctx, true)
		return nil
	}
	var err error
	for try := 1; try <= startBeatTries; try++ {
		if err = r.beat(ctx, true); err == nil || errors.Is(err, driver.ErrNoTable) {
			return nil // (without the table the heartbeat turned itself off)
		}
		if try < startBeatTries {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(20+rand.IntN(80)) * time.Millisecond):
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	r.removeHeartbeat(context.WithoutCancel(ctx)) // in case a write landed unanswered
	return fmt.Errorf("outbox: relay: write the relay's heartbeat row, which shows the other relays of schema %q how it delivers: %w", r.cfg.Schema, err)
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
func (r *Relay) beat(ctx context.Context, start bool) error {
	hb := &r.heartbeat
	hb.mu.Lock()
	b := driver.Beat{RelayProcess: hb.proc, Start: !hb.started, TTL: r.cfg.heartbeatTTL(),
		LastClaim: hb.lastClaim, Forget: heartbeatForget, WithDelivery: hb.withDelivery}
	if start {
		// Relays that start together would wait on each other's new rows
		// (a deadlock on MySQL); the next beat forgets.
		b.Forget = -1
	}
	hb.last = time.Now()
	hb.mu.Unlock()
	bctx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	err := r.drv.Heartbeat(bctx, b)
	cancel()
	if err == nil && b.WithDelivery && !start {
		r.watchDelivery(ctx) // the start's beat is checked by checkDelivery
	}
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
	case start && b.WithDelivery:
		// startBeat tries again, then fails Start.
	default:
		hb.fails++
		if hb.fails == 1 || hb.fails%20 == 0 {
			r.log.Warn("relay heartbeat failed; the relay keeps working, and shows as stale once its row expires",
				slog.Int("failed_beats", hb.fails), slog.Duration("retry_in", r.cfg.HeartbeatInterval), slog.String("error", err.Error()))
		}
	}
	return err
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

// checkDelivery refuses, for Start, to run beside a live relay of the
// schema that delivers otherwise: an unordered relay beside ordered ones
// sends a key's events out of order, and a relay on row leases beside
// relays on owned partitions sends events they have in flight a second
// time. It runs once the lease mode is chosen and the run's first beat
// wrote this relay's row, before any event or partition is taken, and
// reads the rows of the others: of two relays that start at the same
// moment, the second to read sees the first's row, so they never both
// run (both may refuse). A refused relay deletes its row. Relays of
// earlier versions, which do not record how they deliver, and rows gone
// stale are not checked. Each later beat reads the rows again and logs
// (watchDelivery) what a relay with its heartbeat off, or whose first
// beat failed, did not make visible in time.
func (r *Relay) checkDelivery(ctx context.Context) error {
	hb := &r.heartbeat
	rctx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	rows, err := r.drv.Relays(rctx, true)
	cancel()
	switch {
	case errors.Is(err, driver.ErrNoTable):
		return nil // the heartbeat turned itself off and said why
	case err != nil:
		r.removeHeartbeat(context.WithoutCancel(ctx))
		return fmt.Errorf("outbox: relay: read the other relays of schema %q: %w", r.cfg.Schema, err)
	}
	rivals := r.rivals(rows)
	if len(rivals) == 0 {
		return nil
	}
	r.removeHeartbeat(context.WithoutCancel(ctx))
	o := rivals[0]
	return fmt.Errorf("outbox: relay: relay %q (host %q, pid %d) delivers with %s on schema %q, and this relay would deliver with %s: "+
		"every relay of a schema must deliver the same way (docs/ordering.md#one-way-of-delivery-per-schema); "+
		"stop the other relays first, or give this one their settings (a relay that was killed drops out once its heartbeat row goes stale, at most %s from now)",
		o.RelayID, o.Host, o.PID, describeDelivery(o.Delivery), r.cfg.Schema, describeDelivery(hb.proc.Delivery),
		max(o.ExpiresAt.Sub(o.Now), 0).Round(time.Second))
}

// watchDelivery logs, once each, the live relays of the schema found
// delivering otherwise than this one after it started: one with its
// heartbeat off, or whose first beat failed, passes checkDelivery unseen.
func (r *Relay) watchDelivery(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	defer cancel()
	rows, err := r.drv.Relays(ctx, true)
	if err != nil {
		return // the next beat reads them again
	}
	hb := &r.heartbeat
	seen := map[string]bool{}
	for _, o := range r.rivals(rows) {
		seen[o.RelayID] = true
		hb.mu.Lock()
		logged := hb.rivals[o.RelayID]
		hb.mu.Unlock()
		if !logged {
			r.log.Error("another relay of the schema delivers otherwise: while both run, events may be sent twice or a key's events out of order; stop one of them (docs/ordering.md#one-way-of-delivery-per-schema)",
				slog.String("schema", r.cfg.Schema), slog.String("other_relay", o.RelayID), slog.String("other_host", o.Host),
				slog.Int("other_pid", o.PID), slog.String("other_delivery", describeDelivery(o.Delivery)),
				slog.String("delivery", describeDelivery(hb.proc.Delivery)))
		}
	}
	hb.mu.Lock()
	hb.rivals = seen
	hb.mu.Unlock()
}

// rivals returns the live relays among rows, other than this one, that
// record a delivery other than this relay's.
func (r *Relay) rivals(rows []driver.RelayRow) []driver.RelayRow {
	var out []driver.RelayRow
	for _, o := range rows {
		if o.RelayID != r.cfg.RelayID && o.Delivery != (driver.Delivery{}) && o.ExpiresAt.After(o.Now) &&
			o.Delivery != r.heartbeat.proc.Delivery {
			out = append(out, o)
		}
	}
	return out
}

// delivery is how this relay delivers, once Start chose its leases.
func (r *Relay) delivery() driver.Delivery {
	d := driver.Delivery{Ordering: string(r.cfg.Ordering), Leases: string(LeasesRows)}
	if r.ordered() {
		d.OrderedFailure = string(r.cfg.OrderedFailure)
	}
	if r.parts != nil {
		d.Leases = string(LeasesPartitions)
	}
	return d
}

// describeDelivery names a delivery in the relay's settings.
func describeDelivery(d driver.Delivery) string {
	s := "ordering " + d.Ordering
	if d.OrderedFailure != "" {
		s += ", ordered failure " + d.OrderedFailure
	}
	return s + ", leases " + d.Leases
}
