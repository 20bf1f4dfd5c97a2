package cli

import (
	"os/user"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/errtext"
)

func (a *app) eventsDiscardCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "discard ID... --reason TEXT",
		Short: "Dead-letter pending events the relay should stop retrying",
		Long: `discard moves pending events to failed, so the relay stops publishing
them: for an event that will never succeed and would otherwise use up its
attempts (or one that must not be sent at all). Its last error becomes
"discarded with outbox events discard by USER: REASON"; outbox events retry
sends it back.

A failed (dead-lettered) event can be discarded too: it stays failed, with
that last error, is no longer retried by the dead-letter schedule, and, with
relay --ordering aggregate --ordered-failure block, no longer holds back its
aggregate's later events, which go on in order.

Events that are being published (processing), already processed or
discarded, or missing are left alone and reported; it exits 1 when any
named event was not discarded.`,
		Example: "  outbox events discard 4711 --reason 'customer deleted; nothing to notify'",
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("pass the IDs of the pending or failed events to discard")
			}
			reason = strings.TrimSpace(reason)
			if reason == "" {
				return usagef("missing --reason: say why the events are discarded; it becomes their last error")
			}
			ids, m, closePool, err := a.namedEvents(cmd.Context(), args)
			if err != nil {
				return err
			}
			defer closePool()
			stored := errtext.Sanitize("discarded with outbox events discard by "+operatorName()+": "+reason, outbox.ReasonMaxLen)
			changed, err := m.Discard(cmd.Context(), stored, ids...)
			if err != nil {
				return err
			}
			return a.reportChanged(cmd.Context(), m, "discarded", outbox.Status("pending or failed"), outbox.StatusFailed, ids, changed)
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the events are discarded (stored as their last error)")
	return cmd
}

// operatorName is the OS user running the command, for the audit trail a
// discard leaves in last_error.
func operatorName() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "an operator"
}
