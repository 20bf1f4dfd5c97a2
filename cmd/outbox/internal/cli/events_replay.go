package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
)

func (a *app) eventsReplayCommand() *cobra.Command {
	var (
		status string
		ff     filterFlags
		dryRun bool
		yes    bool
		sf     replaySinkFlags
	)
	cmd := &cobra.Command{
		Use:   "replay ID... | --status processed [filters] | --sink URL [filters]",
		Short: "Send processed events back to pending, or publish delivered events to a sink",
		Long: `replay sends processed events back to pending with their attempts reset, so
the relay publishes them again (consumers see the same event ID twice and
drop the duplicate unless they want it).

Name the events by ID, or replay every processed event that the filters
select with --status processed (--type, --aggregate-type, --aggregate-id,
--created-after, --created-before). Replaying with no filter re-sends the
whole history, so it needs --yes. --dry-run counts what would be replayed
and changes nothing. Many events are replayed in batches, with progress
(count, rate, ETA) on a terminal.

For IDs it reports each one it replayed and, for each one it did not, why
(not found, or its status); it exits 1 when any named event was not replayed.
Events a relay deleted or archived (its Retention setting) cannot be replayed
this way.

With --sink URL, replay does not touch the events: it publishes the
delivered ones (processed, and archived by a relay with --retention
archive) straight to that sink, in ID order, for feeding a new consumer the
history it missed; the relays and the other consumers see nothing of it.
The sink URL and its settings (--route, --route-rule, --source,
--webhook-secret, …) are the relay's, and --config supplies them as it does
for the relay, except the sink URL. The filters select events as above,
--since and --until being --created-after and --created-before; with no
filter the whole history is sent, which needs --yes. --dry-run counts the
events. --rate bounds the events per second. It reads in batches of
--batch-size on the ID (keyset), up to the highest ID when it started, so
it ends even while events are written. A refused event is
published again a few times, then the replay stops. It prints one line,
"published N events to SINK; last ID L" (with --json one JSON object), also
when it stops early (Ctrl-C, a refusal, exit 1): every selected event up to
L was published, so --after-id L resumes it. Progress shows on a terminal.`,
		Example: "  outbox events replay 42 43\n" +
			"  outbox events replay --status processed --type order.created --created-after 2025-01-31T00:00:00Z --dry-run\n" +
			"  outbox events replay --status processed --type order.created --created-after 2025-01-31T00:00:00Z\n" +
			"  outbox events replay --sink 'nats://127.0.0.1:4222?stream=ORDERS' --type 'order.created' --since 2025-01-01T00:00:00Z --dry-run\n" +
			"  outbox events replay --sink https://new-consumer.example.com/hooks --webhook-secret \"$SECRET\" --yes --rate 500 --after-id 41872",
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("sink") {
				return a.replayToSink(cmd, args, status, &ff, &sf, dryRun, yes)
			}
			if name := sf.misplaced(cmd); name != "" {
				return usagef("--%s goes with --sink (publish to a sink); without --sink replay sends events back to pending", name)
			}
			filtered := ff.given(cmd)
			bulk := status != "" || filtered
			switch {
			case !bulk && len(args) == 0:
				return usagef("pass event IDs or --status processed (with filters such as --type)")
			case bulk && len(args) > 0:
				return usagef("pass event IDs or --status processed with filters, not both")
			case filtered && status == "":
				return usagef("missing --status processed: the filters select processed events to replay")
			case !bulk && (dryRun || yes):
				return usagef("--dry-run and --yes go with --status processed; named events are replayed as named")
			}
			if !bulk {
				ids, m, closePool, err := a.namedEvents(cmd.Context(), args)
				if err != nil {
					return err
				}
				defer closePool()
				changed, err := a.replayIDs(cmd.Context(), m, ids)
				if err != nil {
					return err
				}
				return a.reportRequeue(cmd.Context(), m, "replayed", outbox.StatusProcessed, ids, changed)
			}
			st, err := parseStatus(status)
			if err != nil {
				return err
			}
			if st != outbox.StatusProcessed {
				return usagef("invalid --status %q: replay takes processed events only", status)
			}
			f, err := ff.filter(outbox.StatusProcessed)
			if err != nil {
				return err
			}
			if !filtered && !yes && !dryRun {
				return usagef("replaying every processed event re-sends the whole history: narrow it with --type, --aggregate-type, --aggregate-id, --created-after or --created-before, check it with --dry-run, or pass --yes")
			}
			m, closePool, err := a.manager(cmd.Context())
			if err != nil {
				return err
			}
			defer closePool()
			if dryRun {
				return a.countMatching(cmd.Context(), m, f, "replay")
			}
			return a.replayMatching(cmd.Context(), m, f)
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&status, "status", "", "replay every event in this status that the filters select (only processed)")
	ff.register(fl, "--status or --sink")
	fl.BoolVar(&dryRun, "dry-run", false, "with --status or --sink: count the events it would replay and change or send nothing")
	fl.BoolVar(&yes, "yes", false, "with --status or --sink and no filter: replay the whole history")
	sf.register(fl)
	return cmd
}

// parseTimeFlag parses an optional RFC 3339 flag value.
func parseTimeFlag(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, usagef("invalid --%s %q: use an RFC 3339 time such as 2025-01-31T09:00:00Z", name, v)
	}
	return t, nil
}

// countMatching prints how many events f selects, for a --dry-run of verb.
func (a *app) countMatching(ctx context.Context, m *outbox.Manager, f outbox.EventFilter, verb string) error {
	n, err := m.CountEvents(ctx, f)
	if err != nil {
		return err
	}
	a.stdout.printf("would %s %d %s events (dry run: nothing changed)\n", verb, n, f.Status)
	return nil
}

// replayIDs replays ids in batches, with progress on a terminal when there
// are many.
func (a *app) replayIDs(ctx context.Context, m *outbox.Manager, ids []int64) ([]int64, error) {
	p := newProgress(a.stderr, "replayed")
	defer p.done()
	p.setTotal(int64(len(ids)))
	var changed []int64
	for start := 0; start < len(ids); start += outbox.RequeueBatchSizeDefault {
		batch := ids[start:min(start+outbox.RequeueBatchSizeDefault, len(ids))]
		c, err := m.Replay(ctx, batch...)
		if err != nil {
			return nil, fmt.Errorf("replay (%d events replayed before the error): %w", len(changed), err)
		}
		changed = append(changed, c...)
		if len(ids) > outbox.RequeueBatchSizeDefault {
			p.update(int64(start + len(batch)))
		}
	}
	return changed, nil
}

// replayMatching replays the processed events f selects. On a terminal it
// counts them first, so the progress line has an ETA.
func (a *app) replayMatching(ctx context.Context, m *outbox.Manager, f outbox.EventFilter) error {
	p := newProgress(a.stderr, "replayed")
	if isTerminal(a.stderr) {
		total, err := m.CountEvents(ctx, f)
		if err != nil {
			return err
		}
		p.setTotal(total)
	}
	n, err := m.ReplayMatching(ctx, f, p.update)
	p.done()
	if err != nil {
		return fmt.Errorf("replay (%d events replayed before the error): %w", n, err)
	}
	a.stdout.printf("replayed %d processed events\n", n)
	return nil
}
