package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/outboxkit/outbox"
)

// writeCaptureSlots lists the capture slots of relay --capture logical, if
// any is recorded, or says that the role may not read them: one line each
// with what an operator watches (is a relay streaming, how much WAL the
// slot keeps on the server's disk).
func writeCaptureSlots(w io.Writer, c *outbox.CaptureStatus) error {
	if c == nil || (len(c.Slots) == 0 && c.Denied == "") {
		return nil
	}
	if c.Denied != "" {
		_, err := fmt.Fprintf(w, "\ncapture slots: unknown (%s)\n", safeText(c.Denied))
		return err
	}
	if _, err := fmt.Fprintf(w, "\ncapture slots (relay --capture logical): %d\n", len(c.Slots)); err != nil {
		return err
	}
	tw := newTable(w, 2)
	for _, s := range c.Slots {
		var parts []string
		switch {
		case !s.Exists:
			parts = append(parts, "missing on the server (the next capture relay creates it again)")
		case s.Active && s.ActivePID != nil:
			parts = append(parts, fmt.Sprintf("active (pid %d)", *s.ActivePID))
		case s.Active:
			parts = append(parts, "active")
		default:
			parts = append(parts, "inactive: no relay streams from it")
		}
		if s.RetainedBytes != nil {
			parts = append(parts, "retains "+bytesize(*s.RetainedBytes)+" of WAL")
		}
		if s.UnconfirmedBytes != nil {
			parts = append(parts, bytesize(*s.UnconfirmedBytes)+" unconfirmed")
		}
		if s.ConfirmedFlushLSN != "" {
			parts = append(parts, "confirmed "+s.ConfirmedFlushLSN)
		}
		if s.WALStatus != nil {
			parts = append(parts, "wal_status "+*s.WALStatus)
		}
		if s.SafeWALSize != nil {
			parts = append(parts, bytesize(*s.SafeWALSize)+" until invalidated")
		}
		switch {
		case s.Holder == "":
		case s.HolderExpired:
			parts = append(parts, "lease of "+safeText(s.Holder)+" expired "+when(s.HolderUntil))
		default:
			parts = append(parts, "held by "+safeText(s.Holder))
		}
		tw.row("  %s\t%s\n", safeText(s.Name), strings.Join(parts, ", "))
	}
	return tw.flush()
}
