package driver

import (
	"context"
	"time"
)

// HeartbeatVersion is the migration that adds outbox_relays, the table of
// relay heartbeats.
const HeartbeatVersion = 6

// DeliveryVersion is the migration that adds how each relay delivers
// (Delivery) to outbox_relays.
const DeliveryVersion = 13

// RelayProcess describes a relay process in its heartbeat row.
type RelayProcess struct {
	RelayID string
	Host    string
	PID     int
	Version string
	// Sink is the relay's display name for its sink, without credentials.
	Sink string
	// EventTypes are the relay's event type patterns, comma-separated;
	// empty for all.
	EventTypes string
	// Delivery is how the relay delivers; zero in a row of a relay of an
	// earlier version, or read without the columns.
	Delivery Delivery
}

// Delivery is how a relay delivers, as its heartbeat row records it from
// migration 13 (DeliveryVersion). Every relay of a schema must deliver the
// same way.
type Delivery struct {
	// Ordering is "none" or "aggregate".
	Ordering string
	// OrderedFailure is "block" or "skip" for an ordered relay, empty
	// otherwise.
	OrderedFailure string
	// Leases is the lease mode the relay runs: "rows" or "partitions".
	Leases string
}

// Beat is one heartbeat of a relay.
type Beat struct {
	RelayProcess
	// Start marks the first heartbeat of a run: it sets started_at to now.
	Start bool
	// TTL is how long the row stays fresh, from now by the database clock.
	TTL time.Duration
	// LastClaim is when the relay last claimed events, by the database
	// clock; zero for never in this run.
	LastClaim time.Time
	// Forget deletes the rows of other relays that have been stale for
	// longer than this; negative for none (a relay's first beat: relays
	// started together would wait on each other's new rows).
	Forget time.Duration
	// WithDelivery writes RelayProcess.Delivery: the schema is at
	// DeliveryVersion.
	WithDelivery bool
}

// RelayRow is a heartbeat row as read back.
type RelayRow struct {
	RelayProcess
	StartedAt time.Time
	LastSeen  time.Time
	ExpiresAt time.Time
	LastClaim time.Time // zero when the relay has not claimed events
	// Now is the database clock when the rows were read.
	Now time.Time
}

// Heartbeats holds the statements of outbox_relays. All need migration 6
// (HeartbeatVersion); before it they fail with ErrNoTable.
type Heartbeats interface {
	// Heartbeat upserts b's row (last_seen now, expires_at now plus b.TTL,
	// started_at now when b.Start) and deletes the rows of other relays
	// whose expires_at lies more than b.Forget in the past.
	Heartbeat(ctx context.Context, b Beat) error
	// RemoveRelay deletes relayID's row.
	RemoveRelay(ctx context.Context, relayID string) error
	// Relays reads every heartbeat row, by relay ID, with the rows'
	// Delivery when withDelivery (the schema is at DeliveryVersion).
	Relays(ctx context.Context, withDelivery bool) ([]RelayRow, error)
}
