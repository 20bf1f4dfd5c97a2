package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
)

func (a *app) eventsRetryCommand() *cobra.Command {
	var (
		status string
		ff     filterFlags
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "retry ID... | --status failed [filters]",
		Short: "Send failed (dead-lettered) events back to pending",
		Long: `retry sends failed events back to pending with their attempts reset and
their last error cleared, so the relay publishes them again. Name the events
by ID, or retry every failed event with --status failed, narrowed by the
filters --type, --aggregate-type, --aggregate-id, --created-after and
--created-before (in batches, with progress on a terminal). --dry-run counts
what would be retried and changes nothing.

It reports each ID it retried and, for each one it did not, why (not found, or
its status); it exits 1 when any named event was not retried.`,
		Example: "  outbox events retry 4711 4712\n" +
			"  outbox events retry --status failed --type invoice.created --dry-run\n" +
			"  outbox events retry --status failed --type invoice.created",
		RunE: run(func(cmd *cobra.Command, args []string) error {
			filtered := ff.given(cmd)
			bulk := status != "" || filtered
			switch {
			case !bulk && len(args) == 0:
				return usagef("pass event IDs or --status failed")
			case bulk && len(args) > 0:
				return usagef("pass event IDs or --status failed, not both")
			case filtered && status == "":
				return usagef("missing --status failed: the filters select failed events to retry")
			case !bulk && dryRun:
				return usagef("--dry-run goes with --status failed; named events are retried as named")
			}
			if !bulk {
				ids, m, closePool, err := a.namedEvents(cmd.Context(), args)
				if err != nil {
					return err
				}
				defer closePool()
				changed, err := m.Retry(cmd.Context(), ids...)
				if err != nil {
					return err
				}
				return a.reportRequeue(cmd.Context(), m, "retried", outbox.StatusFailed, ids, changed)
			}
			st, err := parseStatus(status)
			if err != nil {
				return err
			}
			if st != outbox.StatusFailed {
				return usagef("invalid --status %q: retry takes failed events only", status)
			}
			f, err := ff.filter(outbox.StatusFailed)
			if err != nil {
				return err
			}
			m, closePool, err := a.manager(cmd.Context())
			if err != nil {
				return err
			}
			defer closePool()
			if dryRun {
				return a.countMatching(cmd.Context(), m, f, "retry")
			}
			p := newProgress(a.stderr, "retried")
			var n int64
			if filtered {
				n, err = m.RetryMatching(cmd.Context(), f, p.update)
			} else {
				n, err = m.RetryAllFailed(cmd.Context(), 0, p.update)
			}
			p.done()
			if err != nil {
				return fmt.Errorf("retry failed events (%d retried before the error): %w", n, err)
			}
			a.stdout.printf("retried %d failed events\n", n)
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&status, "status", "", "retry every event in this status that the filters select (only failed)")
	ff.register(fl, "--status")
	fl.BoolVar(&dryRun, "dry-run", false, "with --status: count the events it would retry and change nothing")
	return cmd
}
