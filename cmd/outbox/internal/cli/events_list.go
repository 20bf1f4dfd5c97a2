package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxadmin"
)

// lastErrorWidth is how much of last_error a table row shows.
const lastErrorWidth = 60

func (a *app) eventsListCommand() *cobra.Command {
	var (
		status  string
		p       outbox.ListParams
		asJSON  bool
		tenants tenantFlags
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List events, newest first",
		Long: `list prints events newest first, filtered by the flags, as a table or with
--json as a JSON array. Page backwards with --before-id set to the last ID of
the previous page.

With --tenant-schemas GLOB or --tenant-query SQL (PostgreSQL) it lists every
tenant schema holding an outbox instead of --schema: each tenant's newest
--limit events (the limit is per tenant), tenants in name order, each row
naming its schema (with --json a "schema" field). Event IDs repeat across
tenants, so --before-id pages one tenant: outbox events list --schema NAME
--before-id ID.`,
		Example: "  outbox events list --status failed\n" +
			"  outbox events list --before-id 4711 --limit 100\n" +
			"  outbox events list --tenant-schemas 's_*' --status failed --limit 10 --json",
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if status != "" {
				st, err := parseStatus(status)
				if err != nil {
					return err
				}
				p.Status = st
			}
			if p.Limit < 1 || p.Limit > outbox.ListLimitMax {
				return usagef("invalid --limit %d: use 1 to %d, and page with --before-id", p.Limit, outbox.ListLimitMax)
			}
			if err := checkTextFlags(map[string]string{"type": p.EventType, "aggregate-type": p.AggregateType, "aggregate-id": p.AggregateID}); err != nil {
				return err
			}
			if p.BeforeID < 0 {
				return usagef("invalid --before-id %d: use a positive event ID", p.BeforeID)
			}
			if tenants.on() {
				if p.BeforeID != 0 {
					return usagef("--before-id pages one tenant, since event IDs repeat across tenants: use --schema NAME --before-id %d without %s", p.BeforeID, tenants.flagName())
				}
				return a.listTenants(cmd.Context(), &tenants, p, asJSON)
			}
			m, closePool, err := a.manager(cmd.Context())
			if err != nil {
				return err
			}
			defer closePool()
			events, err := m.ListEvents(cmd.Context(), p)
			if err != nil {
				return err
			}
			if asJSON {
				docs := make([]outboxadmin.EventJSON, len(events))
				for i := range events {
					docs[i] = eventDocument(&events[i])
				}
				return writeJSON(a.stdout, docs)
			}
			tw := newTable(a.stdout, 2)
			tw.row("ID\tSTATUS\tTYPE\tAGGREGATE\tATTEMPTS\tCREATED_AT\tLAST_ERROR\n")
			for i := range events {
				e := &events[i]
				tw.row("%d\t%s\t%s\t%s\t%d\t%s\t%s\n", e.ID, e.Status, safeText(e.EventType), safeText(aggregate(e)),
					e.Attempts, formatTime(e.CreatedAt), safeText(truncate(e.LastError, lastErrorWidth)))
			}
			if err := tw.flush(); err != nil {
				return err
			}
			if len(events) == p.Limit && isTerminal(a.stderr) {
				notef(a.stderr, "more events may follow: pass --before-id %d\n", events[len(events)-1].ID)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&status, "status", "", "only events in this status: pending, processing, processed or failed")
	f.StringVar(&p.EventType, "type", "", "only events of this type")
	f.StringVar(&p.AggregateID, "aggregate-id", "", "only events of this aggregate ID")
	f.StringVar(&p.AggregateType, "aggregate-type", "", "only events of this aggregate type")
	f.Int64Var(&p.BeforeID, "before-id", 0, "only events with a smaller ID (the next page)")
	f.IntVar(&p.Limit, "limit", outbox.ListLimitDefault, "the most events to list (at most "+strconv.Itoa(outbox.ListLimitMax)+")")
	f.BoolVar(&asJSON, "json", false, "print a JSON array")
	tenants.addFlags(f, "list the newest --limit events of every schema")
	return cmd
}

// tenantEventJSON is one event of events list --tenant-schemas --json:
// the event's document with the schema it lives in.
type tenantEventJSON struct {
	Schema string `json:"schema"`
	outboxadmin.EventJSON
}

// listTenants lists the newest p.Limit events of every tenant schema, in
// name order, as one table with a SCHEMA column or one JSON array. A
// tenant that cannot be read fails the command: a partial list would
// look whole.
func (a *app) listTenants(ctx context.Context, t *tenantFlags, p outbox.ListParams, asJSON bool) error {
	type tenantEvents struct {
		schema string
		events []outbox.Event
	}
	var (
		all      []tenantEvents
		firstErr error
	)
	_, _, err := a.eachTenant(ctx, t, func(schema string, m *outbox.Manager) error {
		if firstErr != nil {
			return nil //nolint:nilerr // the first failure is reported once, after the walk
		}
		events, err := m.ListEvents(ctx, p)
		if err != nil {
			firstErr = fmt.Errorf("list the events of tenant %s: %w", quoteSchema(schema), err)
			return nil
		}
		all = append(all, tenantEvents{schema, events})
		return nil
	})
	if err != nil {
		return err
	}
	if firstErr != nil {
		return firstErr
	}
	if asJSON {
		docs := []tenantEventJSON{}
		for _, te := range all {
			for i := range te.events {
				docs = append(docs, tenantEventJSON{Schema: te.schema, EventJSON: eventDocument(&te.events[i])})
			}
		}
		return writeJSON(a.stdout, docs)
	}
	tw := newTable(a.stdout, 2)
	tw.row("SCHEMA\tID\tSTATUS\tTYPE\tAGGREGATE\tATTEMPTS\tCREATED_AT\tLAST_ERROR\n")
	var more []string
	for _, te := range all {
		for i := range te.events {
			e := &te.events[i]
			tw.row("%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\n", safeText(te.schema), e.ID, e.Status, safeText(e.EventType), safeText(aggregate(e)),
				e.Attempts, formatTime(e.CreatedAt), safeText(truncate(e.LastError, lastErrorWidth)))
		}
		if len(te.events) == p.Limit {
			more = append(more, fmt.Sprintf("--schema %s --before-id %d", quoteSchema(te.schema), te.events[len(te.events)-1].ID))
		}
	}
	if err := tw.flush(); err != nil {
		return err
	}
	if len(more) > 0 && isTerminal(a.stderr) {
		notef(a.stderr, "more events may follow in %d tenants: page one with outbox events list %s\n", len(more), safeText(more[0]))
	}
	return nil
}
