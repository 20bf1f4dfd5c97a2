package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
)

func (a *app) eventsRetryCommand() *cobra.Command {
	var (
		status  string
		ff      filterFlags
		dryRun  bool
		tenants tenantFlags
	)
	cmd := &cobra.Command{
		Use:   "retry ID... | --status failed [filters]",
		Short: "Send failed (dead-lettered) events back to pending",
		Long: `retry sends failed events back to pending with their attempts reset and
their last error cleared, so the relay publishes them again. Name the events
by ID, or retry every failed event with --status failed, narrowed by the
filters --type, --aggregate-type, --aggregate-id, --created-after and
--created-before (in batches, with progress on a terminal). --dry-run counts
what would be retried and changes nothing. With --tenant-schemas GLOB or
--tenant-query SQL (PostgreSQL) it retries in every tenant schema holding an
outbox instead of --schema, one line per tenant and a total.

It reports each ID it retried and, for each one it did not, why (not found, or
its status); it exits 1 when any named event was not retried.`,
		Example: "  outbox events retry 4711 4712\n" +
			"  outbox events retry --status failed --type invoice.created --dry-run\n" +
			"  outbox events retry --status failed --type invoice.created\n" +
			"  outbox events retry --status failed --tenant-schemas 's_*' --dry-run",
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
			case !bulk && tenants.on():
				return usagef("event IDs repeat across tenants: name events with --schema, or retry every tenant's with --status failed")
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
			if tenants.on() {
				return a.retryTenants(cmd.Context(), &tenants, f, filtered, dryRun)
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
	tenants.addFlags(fl, "with --status failed: retry in every schema")
	return cmd
}

// retryTenants retries the failed events f selects in every tenant schema,
// reporting per tenant and in total; it goes on past a tenant that fails.
func (a *app) retryTenants(ctx context.Context, t *tenantFlags, f outbox.EventFilter, filtered, dryRun bool) error {
	verb := "retried"
	if dryRun {
		verb = "would retry"
	}
	var total int64
	n, failed, err := a.eachTenant(ctx, t, func(schema string, m *outbox.Manager) error {
		var (
			c   int64
			err error
		)
		switch {
		case dryRun:
			c, err = m.CountEvents(ctx, f)
		case filtered:
			c, err = m.RetryMatching(ctx, f, nil)
		default:
			c, err = m.RetryAllFailed(ctx, 0, nil)
		}
		total += c
		if err != nil {
			return fmt.Errorf("%d %s before the error: %w", c, verb, err)
		}
		a.stdout.printf("%s: %s %d failed events\n", quoteSchema(schema), verb, c)
		return nil
	})
	if err != nil {
		return err
	}
	suffix := ""
	if dryRun {
		suffix = " (dry run: nothing changed)"
	}
	a.stdout.printf("%s %d failed events in %d tenant schemas%s\n", verb, total, n, suffix)
	if failed > 0 {
		return fmt.Errorf("%d of %d tenant schemas failed (see above); run the command again once fixed", failed, n)
	}
	return nil
}
