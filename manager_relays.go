package outbox

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

// RelayInfo is one relay as the operator sees it: its heartbeat row in
// outbox_relays, written by every running relay whether or not it has
// work, and its leases on processing events.
type RelayInfo struct {
	// RelayID is the relay's ID, as stored in locked_by.
	RelayID string
	// Heartbeat is true when the relay has a heartbeat row; false for a
	// relay seen only through its leases (one on a schema before
	// migration 006, with its heartbeat off, or of an older version), for
	// which the process fields below are empty.
	Heartbeat bool
	// Host and PID name the relay's process; Version is the outbox
	// version it runs.
	Host    string
	PID     int
	Version string
	// Sink names the sink the relay publishes to, without credentials.
	Sink string
	// EventTypes are the relay's event type patterns; empty for all.
	EventTypes []string
	// Ordering, OrderedFailure (for an ordered relay) and Leases (rows or
	// partitions, never auto) are how the relay delivers; empty for a
	// relay of an earlier version, or on a schema before migration 13.
	Ordering       Ordering
	OrderedFailure OrderedFailure
	Leases         Leases
	// StartedAt is when the relay started; LastSeen its last heartbeat;
	// LastClaim the last claim that leased events (zero for none since
	// it started). All by the database clock.
	StartedAt, LastSeen, LastClaim time.Time
	// Stale is true when the relay missed its heartbeats for three
	// intervals: it was killed, hangs, or lost the database. A stale row
	// is deleted an hour later by any relay's heartbeat.
	Stale bool
	// Lease is the relay's hold on processing events; Lease.Events is 0
	// for an idle relay.
	Lease Lease
}

// Relays lists the relays of the schema by relay ID: the running ones from
// their heartbeat rows, idle ones included, recently stopped ones that did
// not stop gracefully as stale, and every relay holding leases. On a
// schema before migration 006 it lists the lease holders only.
func (m *Manager) Relays(ctx context.Context) ([]RelayInfo, error) {
	leases, err := m.Leases(ctx)
	if err != nil {
		return nil, err
	}
	// A role that may not read outbox_migrations lists the relays without
	// how they deliver.
	v, err := m.drv.SchemaVersion(ctx)
	rows, err := m.drv.Relays(ctx, err == nil && v >= driver.DeliveryVersion)
	if err != nil && !errors.Is(err, driver.ErrNoTable) {
		return nil, err
	}
	out := make([]RelayInfo, 0, len(rows)+len(leases))
	for _, r := range rows {
		info := RelayInfo{
			RelayID: r.RelayID, Heartbeat: true, Host: r.Host, PID: r.PID, Version: r.Version, Sink: r.Sink,
			StartedAt: r.StartedAt, LastSeen: r.LastSeen, LastClaim: r.LastClaim, Stale: r.ExpiresAt.Before(r.Now),
			Ordering: Ordering(r.Delivery.Ordering), OrderedFailure: OrderedFailure(r.Delivery.OrderedFailure),
			Leases: Leases(r.Delivery.Leases),
		}
		if r.EventTypes != "" {
			info.EventTypes = strings.Split(r.EventTypes, ",")
		}
		out = append(out, info)
	}
	for _, l := range leases {
		i := slices.IndexFunc(out, func(r RelayInfo) bool { return r.RelayID == l.RelayID })
		if i < 0 {
			out = append(out, RelayInfo{RelayID: l.RelayID})
			i = len(out) - 1
		}
		out[i].Lease = l
	}
	slices.SortFunc(out, func(a, b RelayInfo) int { return strings.Compare(a.RelayID, b.RelayID) })
	return out, nil
}
