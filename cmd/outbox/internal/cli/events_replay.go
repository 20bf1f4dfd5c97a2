package cli

import (
	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
)

func (a *app) eventsReplayCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "replay ID...",
		Short: "Send processed events back to pending to publish them again",
		Long: `replay sends processed events back to pending with their attempts reset, so
the relay publishes them again (consumers see the same event ID twice and
drop the duplicate unless they want it).

It reports each ID it replayed and, for each one it did not, why (not found,
or its status); it exits 1 when any named event was not replayed.`,
		Args: cobra.MinimumNArgs(1),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			m, closePool, err := a.manager(cmd.Context())
			if err != nil {
				return err
			}
			defer closePool()
			changed, err := m.Replay(cmd.Context(), ids...)
			if err != nil {
				return err
			}
			return a.reportRequeue(cmd.Context(), m, "replayed", outbox.StatusProcessed, ids, changed)
		}),
	}
}
