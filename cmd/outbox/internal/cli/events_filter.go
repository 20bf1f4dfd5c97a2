package cli

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outboxkit/outbox"
)

// filterFlags are the flags that select events for a bulk retry or
// replay: --type, --aggregate-type, --aggregate-id, --created-after and
// --created-before.
type filterFlags struct {
	f             outbox.EventFilter
	createdAfter  string
	createdBefore string
}

// filterFlagNames are the names register defines.
var filterFlagNames = []string{"type", "aggregate-type", "aggregate-id", "created-after", "created-before"}

// register defines the filter flags on fl; with names the flags they go
// with, such as "--status".
func (ff *filterFlags) register(fl *pflag.FlagSet, with string) {
	fl.StringVar(&ff.f.EventType, "type", "", "with "+with+": only this event type")
	fl.StringVar(&ff.f.AggregateType, "aggregate-type", "", "with "+with+": only this aggregate type")
	fl.StringVar(&ff.f.AggregateID, "aggregate-id", "", "with "+with+": only this aggregate ID")
	fl.StringVar(&ff.createdAfter, "created-after", "", "with "+with+": only events created at or after this RFC 3339 time")
	fl.StringVar(&ff.createdBefore, "created-before", "", "with "+with+": only events created before this RFC 3339 time")
}

// given reports whether any filter flag was set.
func (ff *filterFlags) given(cmd *cobra.Command) bool {
	for _, name := range filterFlagNames {
		if cmd.Flags().Changed(name) {
			return true
		}
	}
	return false
}

// filter is the filter the flags describe, for events in status.
func (ff *filterFlags) filter(status outbox.Status) (outbox.EventFilter, error) {
	f := ff.f
	f.Status = status
	if err := checkTextFlags(map[string]string{"type": f.EventType, "aggregate-type": f.AggregateType, "aggregate-id": f.AggregateID}); err != nil {
		return f, err
	}
	var err error
	if f.CreatedAfter, err = parseTimeFlag("created-after", ff.createdAfter); err != nil {
		return f, err
	}
	if f.CreatedBefore, err = parseTimeFlag("created-before", ff.createdBefore); err != nil {
		return f, err
	}
	if !f.CreatedAfter.IsZero() && !f.CreatedBefore.IsZero() && !f.CreatedAfter.Before(f.CreatedBefore) {
		return f, usagef("invalid --created-before: must be later than --created-after")
	}
	return f, nil
}
