package cli

import (
	"encoding/json"
	"io"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
)

// statsJSON is the stats --json document; its keys are a public contract.
type statsJSON struct {
	Pending                 int64   `json:"pending"`
	Processing              int64   `json:"processing"`
	Processed               int64   `json:"processed"`
	Failed                  int64   `json:"failed"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
}

func (a *app) statsCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count events per status and show the relay's lag",
		Long: `stats counts the events in each status and shows how long the oldest due
pending event has waited: the relay's lag. With --json it prints one object
with the keys pending, processing, processed, failed and
oldest_pending_age_seconds.`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			m, closePool, err := a.manager(cmd.Context())
			if err != nil {
				return err
			}
			defer closePool()
			s, err := m.Stats(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, statsDocument(s))
			}
			return writeStats(a, s)
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func statsDocument(s outbox.Stats) statsJSON {
	return statsJSON{
		Pending: s.Pending, Processing: s.Processing, Processed: s.Processed, Failed: s.Failed,
		// Milliseconds are precision enough for a lag.
		OldestPendingAgeSeconds: math.Round(s.OldestPendingAge.Seconds()*1000) / 1000,
	}
}

func writeStats(a *app, s outbox.Stats) error {
	tw := newTable(a.stdout, 2)
	tw.row("pending\t%d\n", s.Pending)
	tw.row("processing\t%d\n", s.Processing)
	tw.row("processed\t%d\n", s.Processed)
	tw.row("failed\t%d\n", s.Failed)
	tw.row("oldest pending age\t%s\n", s.OldestPendingAge.Round(time.Millisecond))
	return tw.flush()
}

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
