package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
)

func (a *app) eventsShowCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one event with its payload and headers",
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return usagef("events show needs the event's ID: outbox events show ID (outbox events list shows IDs)")
			case len(args) > 1:
				return usagef("events show takes one ID, got %d: run it once per event, or use outbox events list --json", len(args))
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			m, closePool, err := a.manager(cmd.Context())
			if err != nil {
				return err
			}
			defer closePool()
			e, err := m.Event(cmd.Context(), ids[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, eventDocument(&e))
			}
			return a.writeEvent(&e)
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) writeEvent(e *outbox.Event) error {
	tw := newTable(a.stdout, 1)
	field := func(name string, value any) { tw.row("%s:\t%s\n", name, safeText(fmt.Sprint(value))) }
	orDash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	maxAttempts := "relay default"
	if e.MaxAttempts > 0 {
		maxAttempts = fmt.Sprint(e.MaxAttempts)
	}
	field("id", e.ID)
	field("event_type", e.EventType)
	field("aggregate_type", orDash(e.AggregateType))
	field("aggregate_id", orDash(e.AggregateID))
	field("status", e.Status)
	field("attempts", e.Attempts)
	field("max_attempts", maxAttempts)
	if e.LeaseExpiries > 0 {
		// Shown only when there is one: a relay died holding the event.
		field("lease_expiries", e.LeaseExpiries)
	}
	field("last_error", orDash(oneLine(e.LastError)))
	field("idempotency_key", orDash(e.IdempotencyKey))
	field("created_at", formatTime(e.CreatedAt))
	field("updated_at", formatTime(e.UpdatedAt))
	field("available_at", formatTime(e.AvailableAt))
	field("locked_by", orDash(e.LockedBy))
	field("locked_until", formatTime(e.LockedUntil))
	field("processed_at", formatTime(e.ProcessedAt))
	if err := tw.flush(); err != nil {
		return err
	}
	headers := e.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	h, err := json.MarshalIndent(headers, "  ", "  ")
	if err != nil {
		return err
	}
	// JSON escapes C0 controls but not DEL or C1 controls (U+009B, a CSI),
	// and a payload that is not JSON is shown as stored.
	a.stdout.printf("headers:\n  %s\n", safeBlock(string(h)))
	a.stdout.printf("payload:\n  %s\n", safeBlock(prettyJSON(e.Payload, "  ")))
	return nil
}

// prettyJSON indents raw JSON; text that is not JSON is shown as it is.
func prettyJSON(raw []byte, prefix string) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, prefix, "  "); err != nil {
		return strings.TrimSpace(string(raw))
	}
	return b.String()
}
