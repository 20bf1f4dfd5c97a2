package driver

import (
	"fmt"

	"github.com/outboxkit/outbox/internal/errtext"
)

// Expired is an event whose lease expired, as a rescue reads it under its
// row lock.
type Expired struct {
	ID            int64
	Attempts      int
	LeaseExpiries int
	MaxAttempts   int // the row's own, or the rescue's default
	LastError     string
	LockedBy      string
}

// Rescue returns what a rescue sets on e besides the counters (attempts
// and lease_expiries, each one up): its status, pending or, once the
// expiry uses up its last attempt, failed; and its last error, the one it
// had, kept, followed by a note of the expiry, within errtext.MaxLen.
func (e Expired) Rescue() (status, lastError string) {
	relay := e.LockedBy
	if relay == "" {
		relay = "unknown"
	}
	note := "lease expired while held by relay " + relay
	status = StatusPending
	if e.Attempts+1 >= e.MaxAttempts {
		status = StatusFailed
		note += fmt.Sprintf(" (dead-lettered after %d attempts, %d of them ending in a lease expiry: "+
			"publishing this event may crash or stall the relay)", e.Attempts+1, e.LeaseExpiries+1)
	}
	note = errtext.Sanitize(note, errtext.MaxLen)
	const sep = "; "
	keep := errtext.MaxLen - len(note) - len(sep)
	if e.LastError == "" || keep <= len(errtext.Ellipsis) {
		return status, note
	}
	return status, errtext.Sanitize(e.LastError, keep) + sep + note
}
