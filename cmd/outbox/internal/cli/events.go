package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxadmin"
)

func (a *app) eventsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events",
		Short: "List, show, retry, replay and discard events",
		Args:  groupArgs,
		RunE:  groupRun,
	}
	cmd.AddCommand(a.eventsListCommand(), a.eventsShowCommand(), a.eventsRetryCommand(), a.eventsReplayCommand(), a.eventsDiscardCommand())
	return cmd
}

// parseStatus parses a --status value; an unknown status is a usage error
// that lists the valid ones.
func parseStatus(s string) (outbox.Status, error) {
	st, err := outbox.ParseStatus(s)
	if err != nil {
		var ce *outbox.ConfigError
		if errors.As(err, &ce) {
			err = ce.Err
		}
		return "", usagef("invalid --status: %v", err)
	}
	return st, nil
}

// parseIDs parses event IDs, dropping repeats and keeping their order.
func parseIDs(args []string) ([]int64, error) {
	ids := make([]int64, 0, len(args))
	for _, arg := range args {
		id, err := strconv.ParseInt(arg, 10, 64)
		if err != nil || id < 1 {
			return nil, usagef("invalid event ID %q: use a positive integer", arg)
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// namedEvents parses the event IDs a command names and opens the manager
// that acts on them; done closes it.
func (a *app) namedEvents(ctx context.Context, args []string) (ids []int64, m *outbox.Manager, done func(), err error) {
	if ids, err = parseIDs(args); err != nil {
		return nil, nil, nil, err
	}
	if m, done, err = a.manager(ctx); err != nil {
		return nil, nil, nil, err
	}
	return ids, m, done, nil
}

// reportRequeue prints which of ids a retry or replay changed and, for each
// one it did not, why; it fails when any was left unchanged.
func (a *app) reportRequeue(ctx context.Context, m *outbox.Manager, verb string, from outbox.Status, ids, changed []int64) error {
	return a.reportChanged(ctx, m, verb, from, outbox.StatusPending, ids, changed)
}

// reportChanged prints which of ids an operator's action moved from one
// status to another and, for each one it did not, why; it fails when any
// was left unchanged.
func (a *app) reportChanged(ctx context.Context, m *outbox.Manager, verb string, from, to outbox.Status, ids, changed []int64) error {
	skipped := 0
	for _, id := range ids {
		if slices.Contains(changed, id) {
			a.stdout.printf("event %d: %s (%s -> %s)\n", id, verb, from, to)
			continue
		}
		skipped++
		e, err := m.Event(ctx, id)
		switch {
		case errors.Is(err, outbox.ErrNotFound):
			a.stdout.printf("event %d: not %s: not found\n", id, verb)
		case err != nil:
			return err
		case strings.Contains(string(from), string(e.Status)):
			// In the right status but left alone: the action was done
			// before (a dead-lettered event is discarded once).
			a.stdout.printf("event %d: not %s: it was %s already\n", id, verb, verb)
		default:
			a.stdout.printf("event %d: not %s: its status is %s, not %s\n", id, verb, e.Status, from)
		}
	}
	if skipped > 0 {
		return fmt.Errorf("%d of %d events not %s", skipped, len(ids), verb)
	}
	return nil
}

// eventDocument is e as --json prints it: the admin API's event detail
// document, one contract for both.
func eventDocument(e *outbox.Event) outboxadmin.EventJSON { return outboxadmin.NewEventJSON(e, true) }

// formatTime is how tables show a timestamp: UTC, to the second.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// aggregate names an event's aggregate as type/id.
func aggregate(e *outbox.Event) string {
	switch {
	case e.AggregateType == "" && e.AggregateID == "":
		return "-"
	case e.AggregateType == "":
		return e.AggregateID
	case e.AggregateID == "":
		return e.AggregateType
	}
	return e.AggregateType + "/" + e.AggregateID
}

// truncate shortens s to at most n runes on one line, marking the cut.
func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
