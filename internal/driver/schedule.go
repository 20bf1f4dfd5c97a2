package driver

import (
	"context"
	"time"
)

// LeaseParams names a job lease in outbox_leases and the relay that wants
// it.
type LeaseParams struct {
	Name   string
	Holder string
	// TTL is how long the lease lasts from now, by the database clock.
	TTL time.Duration
}

// DeadLetterRetryParams selects one batch of the dead-letter slow retry.
type DeadLetterRetryParams struct {
	// After is how long a dead-lettered event waits, from the pass that
	// schedules it, before it goes back to pending.
	After time.Duration
	// MaxRetries bounds the slow retries of one event; an event that had
	// them all stays failed.
	MaxRetries int
	BatchSize  int
}

// DeadLetterRetryStats describes the dead-lettered events scheduled for a
// slow retry.
type DeadLetterRetryStats struct {
	// Waiting counts failed events with a slow retry scheduled.
	Waiting int64
	// NextDue is the earliest scheduled retry, zero when none is.
	NextDue time.Time
}

// Scheduler holds the statements of the jobs one relay of a fleet runs at a
// time: the job lease and the dead-letter slow retry (the scheduled purge
// uses PurgeBatch). All need migration 005 (SchedulerVersion).
type Scheduler interface {
	// AcquireLease takes or renews the named lease for p.Holder until now
	// plus p.TTL, by the database clock, in one conditional upsert: it
	// succeeds when no row exists, when p.Holder holds it, or when it has
	// expired. held reports whether p.Holder holds it afterwards.
	AcquireLease(ctx context.Context, p LeaseParams) (held bool, err error)
	// ReleaseLease gives the named lease up if holder holds it, so that
	// another relay may take it at once.
	ReleaseLease(ctx context.Context, name, holder string) error
	// ScheduleDeadLetterRetries sets the retry time (now plus p.After) of
	// up to p.BatchSize failed events that have none and had fewer than
	// p.MaxRetries slow retries, in one statement; it returns how many.
	ScheduleDeadLetterRetries(ctx context.Context, p DeadLetterRetryParams) (int64, error)
	// RetryDeadLetters sends up to p.BatchSize failed events whose retry
	// time has come (and that had fewer than p.MaxRetries slow retries)
	// back to pending, due now, with attempts and lease expiries reset and
	// the slow retries counted, in one statement; it returns how many.
	RetryDeadLetters(ctx context.Context, p DeadLetterRetryParams) (int64, error)
	// DeadLetterRetryStats counts the failed events with a slow retry
	// scheduled and finds the next one due.
	DeadLetterRetryStats(ctx context.Context) (DeadLetterRetryStats, error)
}

// DiscardedRetries is the dead_letter_retries a discard stores: an event an
// operator discarded has used up its slow retries, so the dead-letter slow
// retry never publishes it again; a retry by hand still does.
const DiscardedRetries = 1<<31 - 1

// SchedulerVersion is the migration that adds what Scheduler needs: the
// outbox_leases table and the dead-letter retry columns.
const SchedulerVersion = 5
