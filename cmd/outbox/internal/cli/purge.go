package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
)

func (a *app) purgeCommand() *cobra.Command {
	var (
		olderThan string
		status    string
		batchSize int
	)
	cmd := &cobra.Command{
		Use:   "purge --older-than DURATION",
		Short: "Delete processed (or failed) events older than a duration",
		Long: `purge deletes finished events in batches, each in its own short transaction,
so it never holds many locks. Processed events are aged by processed_at, failed
ones by their last update.

Purging processed events also trims outbox_events_archive. When the archive
is partitioned (outbox migrate --partition-archive), purge drops every
partition that lies wholly before the cutoff, after counting its rows, and
deletes in batches only in the partition that straddles it; the count it
prints is exact either way.

On MySQL/MariaDB purge then deletes the outbox_keys rows (the per-aggregate
sequences of ordered delivery) of aggregates with no pending, processing or
failed event, in batches, passing over rows a writer holds.

DURATION is a Go duration (36h, 90m) or a number of days (7d, 1.5d).`,
		Example: "  outbox purge --older-than 7d\n  outbox purge --older-than 30d --status failed",
		Args:    cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if olderThan == "" {
				return usagef("missing --older-than: say how old the events to delete must be, such as 7d")
			}
			age, err := parseDuration(olderThan)
			if err != nil || age <= 0 {
				return usagef("invalid --older-than %q: use a positive duration such as 7d, 36h or 90m", olderThan)
			}
			st, err := parseStatus(status)
			if err != nil {
				return err
			}
			if st != outbox.StatusProcessed && st != outbox.StatusFailed {
				return usagef("invalid --status %q: purge deletes processed or failed events only", status)
			}
			if batchSize < 1 {
				return usagef("invalid --batch-size %d: use a positive number", batchSize)
			}
			m, closePool, err := a.manager(cmd.Context())
			if err != nil {
				return err
			}
			defer closePool()
			p := newProgress(a.stderr, "purged")
			n, err := m.Purge(cmd.Context(), outbox.PurgeParams{Status: st, OlderThan: age, BatchSize: batchSize}, p.update)
			p.done()
			if err != nil {
				return fmt.Errorf("purge (%d events deleted before the error): %w", n, err)
			}
			a.stdout.printf("purged %d %s events older than %s\n", n, st, olderThan)
			k, err := m.PruneKeys(cmd.Context(), batchSize, nil)
			if err != nil {
				return fmt.Errorf("purge: pruning outbox_keys (%d rows deleted before the error): %w", k, err)
			}
			if k > 0 {
				a.stdout.printf("pruned %d outbox_keys rows of aggregates with no unfinished event\n", k)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&olderThan, "older-than", "", "delete events finished longer ago than this, such as 7d or 36h (required)")
	f.StringVar(&status, "status", string(outbox.StatusProcessed), "which events to delete: processed (also in outbox_events_archive) or failed")
	f.IntVar(&batchSize, "batch-size", outbox.PurgeBatchSizeDefault, "rows deleted per batch")
	return cmd
}
