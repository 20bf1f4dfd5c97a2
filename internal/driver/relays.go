package driver

import (
	"context"
	"time"
)

// HeartbeatVersion is the migration that adds outbox_relays, the table of
// relay heartbeats.
const HeartbeatVersion = 6

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
	// longer than this.
	Forget time.Duration
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
	// Relays reads every heartbeat row, by relay ID.
	Relays(ctx context.Context) ([]RelayRow, error)
}
