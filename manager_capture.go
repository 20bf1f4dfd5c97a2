package outbox

import (
	"context"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

// CaptureSlot is the logical replication slot of a change-data-capture
// relay (outbox relay --capture logical, package outboxcdc) as the server
// reports it, with the relay that holds it. A pointer is nil where the
// server does not report the figure.
type CaptureSlot struct {
	// Name is the slot's (and its publication's) name.
	Name string
	// Exists is false for a slot recorded for the schema that the server
	// no longer has: dropped by hand, or lost in a failover. The next
	// capture relay creates it again.
	Exists bool
	// Active is true while a relay streams from the slot; ActivePID is
	// that relay's walsender process on the server.
	Active    bool
	ActivePID *int64
	// RetainedBytes is the WAL the slot keeps on the server's disk: what
	// an abandoned slot grows until the disk is full. UnconfirmedBytes is
	// the WAL written since the relay's confirmed position
	// (ConfirmedFlushLSN).
	RetainedBytes, UnconfirmedBytes *int64
	ConfirmedFlushLSN               string
	// WALStatus is reserved, extended, unreserved or lost (the server
	// invalidated the slot), and SafeWALSize the WAL that may still be
	// written before the slot is invalidated (set only with
	// max_slot_wal_keep_size): PostgreSQL 13 and later.
	WALStatus   *string
	SafeWALSize *int64
	// Holder is the relay named by the slot's lease row in outbox_leases
	// (capture:<slot>), "" for none; HolderUntil is when the row expires
	// by the database clock, and HolderExpired says it did: the relay
	// stopped renewing it (it died or hangs).
	Holder        string
	HolderUntil   time.Time
	HolderExpired bool
}

// CaptureStatus is what Manager.CaptureSlots found.
type CaptureStatus struct {
	// Slots are the capture slots recorded for the schema, by name; none
	// when capture was never set up.
	Slots []CaptureSlot
	// Denied, when not empty, says that the role may not read the slots'
	// records, and what to grant; Slots is then empty.
	Denied string
}

// CaptureSlots reads the change-data-capture slots of the schema from the
// server's catalog (pg_replication_slots), with one cheap statement that
// reads no outbox table. It returns nil on a database without logical
// replication (SQLite, MySQL/MariaDB). A role that may not read the
// slots' records gets a CaptureStatus that says so, not an error.
func (m *Manager) CaptureSlots(ctx context.Context) (*CaptureStatus, error) {
	ci, ok := m.drv.(driver.CaptureInspector)
	if !ok {
		return nil, nil
	}
	res, err := ci.ReplicationSlots(ctx)
	if err != nil {
		return nil, err
	}
	out := &CaptureStatus{Slots: make([]CaptureSlot, len(res.Slots)), Denied: res.Denied}
	for i, s := range res.Slots {
		out.Slots[i] = CaptureSlot(s)
	}
	return out, nil
}
