package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
)

func (a *app) eventsRetryCommand() *cobra.Command {
	var status string
	cmd := &cobra.Command{
		Use:   "retry ID... | --status failed",
		Short: "Send failed (dead-lettered) events back to pending",
		Long: `retry sends failed events back to pending with their attempts reset, so the
relay publishes them again. Name the events by ID, or retry every failed event
with --status failed (in batches, with progress on a terminal).

It reports each ID it retried and, for each one it did not, why (not found, or
its status); it exits 1 when any named event was not retried.`,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			switch {
			case status == "" && len(args) == 0:
				return usagef("pass event IDs or --status failed")
			case status != "" && len(args) > 0:
				return usagef("pass event IDs or --status failed, not both")
			}
			var ids []int64
			if status != "" {
				st, err := parseStatus(status)
				if err != nil {
					return err
				}
				if st != outbox.StatusFailed {
					return usagef("invalid --status %q: retry takes failed events only", status)
				}
			} else {
				var err error
				if ids, err = parseIDs(args); err != nil {
					return err
				}
			}
			m, closePool, err := a.manager(cmd.Context())
			if err != nil {
				return err
			}
			defer closePool()
			if status != "" {
				p := newProgress(a.stderr, "retried")
				n, err := m.RetryAllFailed(cmd.Context(), 0, p.update)
				p.done()
				if err != nil {
					return fmt.Errorf("retry failed events (%d retried before the error): %w", n, err)
				}
				a.stdout.printf("retried %d failed events\n", n)
				return nil
			}
			changed, err := m.Retry(cmd.Context(), ids...)
			if err != nil {
				return err
			}
			return a.reportRequeue(cmd.Context(), m, "retried", outbox.StatusFailed, ids, changed)
		}),
	}
	cmd.Flags().StringVar(&status, "status", "", "retry every event in this status (only failed)")
	return cmd
}
