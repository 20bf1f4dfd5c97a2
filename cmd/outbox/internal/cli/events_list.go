package cli

import (
	"strconv"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxadmin"
)

// lastErrorWidth is how much of last_error a table row shows.
const lastErrorWidth = 60

func (a *app) eventsListCommand() *cobra.Command {
	var (
		status string
		p      outbox.ListParams
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List events, newest first",
		Long: `list prints events newest first, filtered by the flags, as a table or with
--json as a JSON array. Page backwards with --before-id set to the last ID of
the previous page.`,
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
	return cmd
}
