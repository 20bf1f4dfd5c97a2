package outboxadmin

import (
	"net/http"
	"time"

	"github.com/outboxkit/outbox"
)

// CaptureJSON is GET /api/capture, and the capture key of outbox stats
// --json: the logical replication slots of relay --capture logical
// (outbox.Manager.CaptureSlots). Available is false on a database without
// logical replication (SQLite, MySQL/MariaDB); stats --json then omits the
// key. Denied, when not empty, says the role may not read the slots'
// records and what to grant.
type CaptureJSON struct {
	Available bool              `json:"available"`
	Slots     []CaptureSlotJSON `json:"slots"`
	Denied    string            `json:"denied,omitempty"`
}

// CaptureSlotJSON is one capture slot (outbox.CaptureSlot). A figure the
// server does not report is null.
type CaptureSlotJSON struct {
	Slot string `json:"slot"`
	// Exists is false for a recorded slot the server no longer has.
	Exists    bool   `json:"exists"`
	Active    bool   `json:"active"`
	ActivePID *int64 `json:"active_pid"`
	// RetainedBytes is the WAL the slot keeps on the server's disk.
	RetainedBytes     *int64  `json:"retained_bytes"`
	UnconfirmedBytes  *int64  `json:"unconfirmed_bytes"`
	ConfirmedFlushLSN string  `json:"confirmed_flush_lsn"`
	WALStatus         *string `json:"wal_status"`
	SafeWALSize       *int64  `json:"safe_wal_size"`
	// Holder is the relay named by the slot's lease row, "" for none;
	// HolderExpired says the row expired (the relay stopped renewing it).
	Holder        string     `json:"holder"`
	HolderUntil   *time.Time `json:"holder_until"`
	HolderExpired bool       `json:"holder_expired"`
}

// NewCaptureJSON converts c to its JSON form; nil (no logical
// replication) is available false.
func NewCaptureJSON(c *outbox.CaptureStatus) CaptureJSON {
	out := CaptureJSON{Slots: []CaptureSlotJSON{}}
	if c == nil {
		return out
	}
	out.Available, out.Denied = true, c.Denied
	for _, s := range c.Slots {
		out.Slots = append(out.Slots, CaptureSlotJSON{
			Slot: s.Name, Exists: s.Exists, Active: s.Active, ActivePID: s.ActivePID,
			RetainedBytes: s.RetainedBytes, UnconfirmedBytes: s.UnconfirmedBytes, ConfirmedFlushLSN: s.ConfirmedFlushLSN,
			WALStatus: s.WALStatus, SafeWALSize: s.SafeWALSize,
			Holder: s.Holder, HolderUntil: optionalTime(s.HolderUntil), HolderExpired: s.HolderExpired,
		})
	}
	return out
}

func (h *Handler) capture(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.dbContext(r)
	defer cancel()
	c, err := h.cfg.Manager.CaptureSlots(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewCaptureJSON(c))
}
