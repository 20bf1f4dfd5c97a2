package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

// Ordering says whether the relay keeps the events of an aggregate in order.
type Ordering string

// Ordering modes.
const (
	// OrderingNone publishes due events in batches with no order between
	// them beyond a best effort by due time: the default, and the fastest.
	OrderingNone Ordering = "none"
	// OrderingAggregate keeps per-aggregate order: for each key
	// (AggregateType, AggregateID) the sink's first acknowledgements
	// follow the order the events were written in (see the README,
	// "Guarantees"), across any number of relays and workers, crashes,
	// lease expiries and retries. Events without an aggregate ID are not
	// ordered. PostgreSQL, SQLite and MySQL/MariaDB (schema migration 7).
	OrderingAggregate Ordering = "aggregate"
)

// ParseOrdering returns the ordering mode named s.
func ParseOrdering(s string) (Ordering, error) {
	switch o := Ordering(s); o {
	case OrderingNone, OrderingAggregate:
		return o, nil
	}
	return "", &ConfigError{Field: "Ordering", Err: fmt.Errorf("unknown mode %q: use none or aggregate", s)}
}

// OrderedFailure says what an aggregate's later events do, in ordered mode,
// once its first unfinished event is dead-lettered.
type OrderedFailure string

// Ordered failure policies. While the first event is still being retried,
// the later ones wait under either policy.
const (
	// OrderedFailureBlock keeps the later events pending, unsent, until an
	// operator retries the dead event (outbox events retry), discards it
	// (outbox events discard), or deletes it: order is never broken. The
	// default.
	OrderedFailureBlock OrderedFailure = "block"
	// OrderedFailureSkip lets the later events go on once the first is
	// dead-lettered: the key keeps flowing, with a gap where the dead event
	// was (retrying it later sends it after the events that followed it).
	OrderedFailureSkip OrderedFailure = "skip"
)

// ParseOrderedFailure returns the ordered failure policy named s.
func ParseOrderedFailure(s string) (OrderedFailure, error) {
	switch f := OrderedFailure(s); f {
	case OrderedFailureBlock, OrderedFailureSkip:
		return f, nil
	}
	return "", &ConfigError{Field: "OrderedFailure", Err: fmt.Errorf("unknown policy %q: use block or skip", s)}
}

// validateOrdering checks the ordering fields of a config with defaults.
func (c RelayConfig) validateOrdering() error {
	if _, err := ParseOrdering(string(c.Ordering)); err != nil {
		return err
	}
	if _, err := ParseOrderedFailure(string(c.OrderedFailure)); err != nil {
		return err
	}
	if c.Ordering != OrderingAggregate {
		if c.OrderedFailure == OrderedFailureSkip {
			return &ConfigError{Field: "OrderedFailure", Err: fmt.Errorf("is skip, but Ordering is %s: set Ordering to aggregate, or leave the policy unset", c.Ordering)}
		}
		return nil
	}
	if len(c.EventTypes) > 0 {
		// A key's order runs across its event types: a relay serving some
		// types would have to wait for events only other relays send, and
		// a key would stop for good at an event of a type no relay serves.
		return &ConfigError{Field: "EventTypes", Err: fmt.Errorf("is set with Ordering aggregate, which does not support an event type filter: a key's order spans its event types, so relays split by type would wait on each other and a key would stall at a type no relay serves; run one ordered relay fleet for all types and send types to different destinations (outbox relay --route-rule, a route.Router in a broker sink)")}
	}
	return nil
}

// ordered reports whether the relay keeps per-aggregate order.
func (r *Relay) ordered() bool { return r.cfg.Ordering == OrderingAggregate }

// checkOrdering refuses to start an ordered relay on a database or a schema
// that cannot keep the order.
func (r *Relay) checkOrdering(ctx context.Context, version func() (int, error)) error {
	r.parts = nil
	if !r.ordered() {
		return nil
	}
	if oc, ok := r.drv.(driver.OrderedClaimer); !ok || oc.OrderingSupported() != nil {
		return fmt.Errorf("outbox: relay: ordering %q is not supported by this database driver; use ordering none", OrderingAggregate)
	}
	v, err := version()
	if err != nil {
		return fmt.Errorf("outbox: relay: read the schema version: %w", err)
	}
	if v > 0 && v < driver.OrderedVersion {
		return fmt.Errorf("outbox: relay: ordering %q needs schema version %d, schema %q is at %d: run outbox migrate",
			OrderingAggregate, driver.OrderedVersion, r.cfg.Schema, v)
	}
	if p, ok := r.drv.(driver.OrderingPreparer); ok && v > 0 {
		if err := p.OrderingPrepared(ctx); err != nil {
			if errors.Is(err, driver.ErrOrderingNotPrepared) {
				return fmt.Errorf("outbox: relay: ordering %q: schema %q lacks the key-sequence trigger outbox_events_key_seq that numbers each aggregate's events on MySQL/MariaDB: run outbox migrate --ordering aggregate (outboxmigrate.Config.Ordering) before starting ordered relays",
					OrderingAggregate, r.cfg.Schema)
			}
			return fmt.Errorf("outbox: relay: check the key-sequence trigger: %w", err)
		}
	}
	return nil
}

// claimOrdered leases a batch that keeps per-aggregate order.
func (r *Relay) claimOrdered(ctx context.Context, size int) (driver.Claim, error) {
	return r.drv.(driver.OrderedClaimer).ClaimOrdered(ctx, driver.OrderedClaimParams{RelayID: r.cfg.RelayID,
		BatchSize: size, Lease: r.cfg.Lease, Skip: r.cfg.OrderedFailure == OrderedFailureSkip, MaxBytes: int64(r.cfg.MaxBatchBytes)})
}

// leaseMargin is how long before its lease's end, by this process's clock,
// a relay stops publishing an ordered or a partition batch (publishWithin):
// another relay may own the events once the lease ends, and must be the
// only one sending them (and a key's next event). The lease's start is
// taken as the moment the claim was sent, which is before the database
// set it, so the local deadline falls before the real one even without
// the margin; the margin covers clock drift and scheduling delays.
func leaseMargin(lease time.Duration) time.Duration {
	return min(lease/10, 2*time.Second)
}

// errLeaseEnding is the result of events a relay did not send because
// their lease was about to end (publishWithin).
var errLeaseEnding = errors.New("not sent: the batch's lease was about to end")

// publishWithin publishes a batch bounded by its local lease deadline,
// checked before the call too, so that a relay that paused past its lease
// does not send an event another relay may own by now: an ordered batch
// (whose events must not overtake a later owner's), and a partition read's
// (whose lease is what was left of its partitions' lease, at least half a
// lease, which a sink timeout may pass).
func (r *Relay) publishWithin(ctx context.Context, events []Event, deadline time.Time) []error {
	if !time.Now().Before(deadline) {
		r.log.Warn("batch not published: its lease is about to end (the relay was paused or slow); the events go back to pending",
			slog.Int("events", len(events)))
		return BatchError(len(events), errLeaseEnding)
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return r.publish(ctx, events)
}
