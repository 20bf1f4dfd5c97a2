package cli

import (
	"errors"
	"time"

	"github.com/spf13/pflag"

	"github.com/outboxkit/outbox"
)

// dayDuration is a flag holding a duration that may use days ("7d",
// "1d12h"), as purge --older-than does; 0 turns the job off.
type dayDuration struct{ d *time.Duration }

// Set parses a duration such as 7d, 36h or 90m.
func (v dayDuration) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil || d < 0 {
		return errors.New("use a duration such as 7d, 36h or 90m (0 for off)")
	}
	*v.d = d
	return nil
}

// String prints the duration as Go does, "0" for off (which the help
// leaves out as the zero default).
func (v dayDuration) String() string {
	if *v.d == 0 {
		return "0"
	}
	return v.d.String()
}

// Type names the value in the help.
func (dayDuration) Type() string { return "duration" }

// addScheduleFlags adds the relay's scheduled-job flags.
func addScheduleFlags(f *pflag.FlagSet, cfg *outbox.RelayConfig) {
	cfg.PurgeInterval = outbox.PurgeIntervalDefault
	cfg.DeadLetterRetries = outbox.DeadLetterRetriesDefault
	f.Var(dayDuration{&cfg.PurgeAfter}, "purge-after", "delete processed (and archived) events older than this, such as 7d, on one relay of the fleet at a time (elected by a lease in outbox_leases); 0 for no scheduled purge")
	f.Var(dayDuration{&cfg.PurgeFailedAfter}, "purge-failed-after", "with the scheduled jobs, also delete dead-lettered (failed) events that failed longer ago than this; 0 keeps them")
	f.Var(dayDuration{&cfg.PurgeInterval}, "purge-interval", "how often the leading relay purges")
	f.Var(dayDuration{&cfg.DeadLetterRetry}, "dead-letter-retry", "send each dead-lettered event back to pending this long after it failed, with its attempts reset, on one relay of the fleet at a time; 0 for no slow retry")
	f.IntVar(&cfg.DeadLetterRetries, "dead-letter-retries", outbox.DeadLetterRetriesDefault, "most slow retries of one event (with --dead-letter-retry)")
	cfg.ScheduleLease = outbox.ScheduleLeaseDefault
	f.Var(dayDuration{&cfg.ScheduleLease}, "schedule-lease", "with the scheduled jobs, how long the job lease lasts: a relay that dies holding it delays the jobs this long (at least 1s)")
}

// scheduleFlagNames maps the scheduled jobs' RelayConfig fields to flags.
var scheduleFlagNames = map[string]string{
	"PurgeAfter": "purge-after", "PurgeFailedAfter": "purge-failed-after", "PurgeInterval": "purge-interval",
	"DeadLetterRetry": "dead-letter-retry", "DeadLetterRetries": "dead-letter-retries", "ScheduleLease": "schedule-lease",
}

func init() {
	for field, flag := range scheduleFlagNames {
		relayFlagNames[field] = flag
	}
}

// deadLetterRetryRow adds the slow retries waiting to the stats table, when
// any is.
func deadLetterRetryRow(tw *table, d outbox.DeadLetterRetryStats) {
	if d.Waiting == 0 {
		return
	}
	tw.row("dead-letter retry\t%d waiting, next due %s\n", d.Waiting, d.NextDue.UTC().Format(time.RFC3339))
}
