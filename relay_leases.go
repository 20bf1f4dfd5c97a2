package outbox

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

// StopGrace is how long Relay.Stop (and so Run) waits, after its context
// ends and the in-flight publishes are cancelled, for their events to be
// released, and then for the relay's goroutines to return. Stop returns
// after it even when the database is down or a sink ignores the
// cancellation; the events it could not release stay leased until their
// lease ends, and Stop logs how many and until when.
const StopGrace = 3 * time.Second

// releaseGrace is the part of StopGrace given to the releases; the rest is
// for the goroutines to notice that the releases were abandoned.
const releaseGrace = 2 * time.Second

// leaseBook tracks the batches this relay holds leased, so that a stop
// that could not settle them all says what it left, why and until when.
// Batches are keyed by their fence's lease end (the database's clock);
// two batches claimed at the same microsecond share an entry, which only
// merges their counts.
type leaseBook struct {
	mu      sync.Mutex
	batches map[int64]*leasedBatch
}

// leasedBatch is what the book knows of one batch.
type leasedBatch struct {
	lockedUntil time.Time
	events      int   // leased and not settled (marked or released) yet
	publishing  bool  // the sink has not returned yet
	finished    bool  // its handler returned: what is left was abandoned
	lastErr     error // the last failed settle, if any
}

// claimed records a new batch of n events under f. Abandoned batches whose
// lease ended before this claim (by the database clock: the claim's lease
// end minus the lease) are no longer this relay's and are forgotten.
func (b *leaseBook) claimed(f driver.Fence, n int, lease time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.batches == nil {
		b.batches = map[int64]*leasedBatch{}
	}
	dbNow := f.LockedUntil.Add(-lease)
	for k, e := range b.batches {
		if e.finished && !e.lockedUntil.After(dbNow) {
			delete(b.batches, k)
		}
	}
	e := b.batches[f.LockedUntil.UnixNano()]
	if e == nil {
		e = &leasedBatch{lockedUntil: f.LockedUntil}
		b.batches[f.LockedUntil.UnixNano()] = e
	}
	e.events += n
	e.publishing = true
}

// settling records that the batch under f is past its publish.
func (b *leaseBook) settling(f driver.Fence) {
	b.update(f, func(e *leasedBatch) { e.publishing = false })
}

// settled records that n events under f were marked or released.
func (b *leaseBook) settled(f driver.Fence, n int) {
	b.update(f, func(e *leasedBatch) { e.events -= n })
}

// failed records that settling events under f was abandoned after err.
func (b *leaseBook) failed(f driver.Fence, err error) {
	b.update(f, func(e *leasedBatch) { e.lastErr = err })
}

// finish records that the handler of the batch under f returned: a batch
// with nothing left is forgotten, one with events left stays until a
// later claim finds its lease over.
func (b *leaseBook) finish(f driver.Fence) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := f.LockedUntil.UnixNano()
	if e := b.batches[k]; e != nil {
		e.finished = true
		if e.events <= 0 {
			delete(b.batches, k)
		}
	}
}

func (b *leaseBook) update(f driver.Fence, fn func(*leasedBatch)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.batches[f.LockedUntil.UnixNano()]; e != nil {
		fn(e)
	}
}

// leftBehind sums what the book still holds.
type leftBehind struct {
	events     int       // still leased by this relay
	publishing int       // of those, in publishes that have not returned
	until      time.Time // the latest lease end among them
	lastErr    error     // the last database error that stopped a settle
}

func (b *leaseBook) left() leftBehind {
	b.mu.Lock()
	defer b.mu.Unlock()
	var l leftBehind
	for _, e := range b.batches {
		if e.events <= 0 {
			continue
		}
		l.events += e.events
		if e.publishing {
			l.publishing += e.events
		}
		if e.lockedUntil.After(l.until) {
			l.until = e.lockedUntil
		}
		if e.lastErr != nil {
			l.lastErr = e.lastErr
		}
	}
	return l
}

// reportLeft logs the events a stopping relay leaves leased, and why.
func (r *Relay) reportLeft() bool {
	l := r.book.left()
	if l.events == 0 {
		return false
	}
	attrs := []any{slog.Int("events", l.events), slog.Time("leases_expire_at", l.until),
		slog.Int("publishing", l.publishing), slog.Int("unsettled", l.events-l.publishing)}
	var reasons []string
	if l.publishing > 0 {
		reasons = append(reasons, "the sink did not return from publishing after it was cancelled")
	}
	if l.events > l.publishing {
		reasons = append(reasons, "the database did not take the marks or releases")
	}
	if l.lastErr != nil {
		attrs = append(attrs, slog.String("error", l.lastErr.Error()))
	}
	attrs = append(attrs, slog.String("reason", strings.Join(reasons, "; ")))
	r.log.Warn("relay stopped with events still leased; their leases expire at leases_expire_at (database clock) and another relay, or this one restarted, will take them over (the expiry counts as one attempt for each)", attrs...)
	return true
}

// warnDB logs a failed database call that will be retried in wait. A
// read-only database (a demoted primary after a failover) gets a message
// of its own: the relay waits for a writable one and spends no attempt.
func (r *Relay) warnDB(log *slog.Logger, what string, err error, wait time.Duration) {
	if errors.Is(err, ErrReadOnly) {
		log.Warn("database is read-only (demoted primary?); waiting", slog.String("operation", what),
			slog.String("error", err.Error()), slog.Duration("retry_in", wait))
		return
	}
	log.Warn(what+" failed; retrying", slog.String("error", err.Error()), slog.Duration("retry_in", wait))
}
