package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
)

func (a *app) purgeCommand() *cobra.Command {
	var (
		olderThan string
		status    string
		batchSize int
		tenants   tenantFlags
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

With --tenant-schemas GLOB or --tenant-query SQL (PostgreSQL) it purges every
tenant schema holding an outbox instead of --schema, one line per tenant and a
total; it goes on past a tenant that fails and exits 1 if any did.

DURATION is a Go duration (36h, 90m) or a number of days (7d, 1.5d).`,
		Example: "  outbox purge --older-than 7d\n  outbox purge --older-than 30d --status failed\n" +
			"  outbox purge --older-than 7d --tenant-schemas 's_*'",
		Args: cobra.NoArgs,
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
			params := outbox.PurgeParams{Status: st, OlderThan: age, BatchSize: batchSize}
			if tenants.on() {
				return a.purgeTenants(cmd.Context(), &tenants, params, olderThan)
			}
			m, closePool, err := a.manager(cmd.Context())
			if err != nil {
				return err
			}
			defer closePool()
			p := newProgress(a.stderr, "purged")
			n, err := m.Purge(cmd.Context(), params, p.update)
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
	tenants.addFlags(f, "purge every schema")
	return cmd
}

// purgeTenants purges every tenant schema in turn, reporting per tenant
// and in total; it goes on past a tenant that fails.
func (a *app) purgeTenants(ctx context.Context, t *tenantFlags, params outbox.PurgeParams, olderThan string) error {
	var total int64
	p := newProgress(a.stderr, "purged")
	n, failed, err := a.eachTenant(ctx, t, func(schema string, m *outbox.Manager) error {
		before := total
		c, err := m.Purge(ctx, params, func(done int64) { p.update(before + done) })
		total += c
		if err != nil {
			p.done()
			return fmt.Errorf("%d events deleted before the error: %w", c, err)
		}
		if _, err := m.PruneKeys(ctx, params.BatchSize, nil); err != nil {
			p.done()
			return fmt.Errorf("purged %d events, then pruning outbox_keys: %w", c, err)
		}
		p.done()
		a.stdout.printf("%s: purged %d %s events older than %s\n", quoteSchema(schema), c, params.Status, olderThan)
		return nil
	})
	if err != nil {
		return err
	}
	a.stdout.printf("purged %d %s events older than %s in %d tenant schemas\n", total, params.Status, olderThan, n)
	if failed > 0 {
		return fmt.Errorf("%d of %d tenant schemas failed (see above); run the command again once fixed", failed, n)
	}
	return nil
}
