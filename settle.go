package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/outboxkit/outbox/internal/driver"
)

// Marks the database refuses. A batch's mark is one statement (or one
// transaction); when the database refuses it for the data it carries
// (driver.ErrDataRefused: a constraint, a value it cannot store), retrying
// the same statement fails again, forever, and the lease expiry that ends
// the retries would only bring the batch back to fail the same way. So the
// relay settles such a batch row by row instead: every row whose own mark
// succeeds is settled as usual, and a row whose own mark is refused too is
// dead-lettered with a reason that says so. These round trips happen only
// after a refusal, never on the normal path.

// markProcessedEach marks ids one at a time after the database refused
// their mark as a batch (cause), and returns how many it marked and how
// many it dead-lettered instead.
func (r *Relay) markProcessedEach(ctx context.Context, f driver.Fence, ids []int64, cause error) (marked int64, refused int) {
	r.log.Warn("the database refused a batch's processed mark; marking its events one at a time",
		slog.Int("events", len(ids)), slog.String("error", cause.Error()))
	for _, id := range ids {
		if ctx.Err() != nil {
			break // the lease ran out: the rest are rescued
		}
		var n int64
		err := r.retryDB(ctx, f, 1, "mark processed", func(ctx context.Context) (err error) {
			n, err = r.drv.MarkProcessed(ctx, f, []int64{id}, driver.Retention(r.cfg.Retention))
			return err
		})
		if errors.Is(err, driver.ErrDataRefused) {
			if r.deadLetterRefused(ctx, f, id, "it was published, but the database refused to mark it processed", err) {
				refused++
			}
			continue
		}
		marked += n
	}
	return marked, refused
}

// markFailedEach records failures one at a time after the database refused
// them as a batch (cause), and returns what it recorded and how many events
// it dead-lettered because their own mark was refused.
func (r *Relay) markFailedEach(ctx context.Context, f driver.Fence, failures []driver.Failure, cause error) (driver.FailResult, int) {
	r.log.Warn("the database refused a batch's failure mark; marking its events one at a time",
		slog.Int("events", len(failures)), slog.String("error", cause.Error()))
	var (
		res     driver.FailResult
		refused int
	)
	for _, fl := range failures {
		if ctx.Err() != nil {
			break
		}
		var one driver.FailResult
		err := r.retryDB(ctx, f, 1, "mark failed", func(ctx context.Context) (err error) {
			one, err = r.drv.MarkFailed(ctx, f, r.cfg.MaxAttempts, []driver.Failure{fl})
			return err
		})
		if errors.Is(err, driver.ErrDataRefused) {
			// The publish error is left out of the reason: it may be what
			// the database refused.
			if r.deadLetterRefused(ctx, f, fl.ID, "its publish failed, and the database refused to record the failure", err) {
				refused++
			}
			continue
		}
		res.Retried = append(res.Retried, one.Retried...)
		res.Dead = append(res.Dead, one.Dead...)
	}
	return res, refused
}

// deadLetterRefused moves one event whose mark the database refused to
// failed, with a last error that says why, runs the dead-letter hooks and
// reports whether it did. If the database refuses that too, the event stays
// leased: the lease rescue counts the expiry as an attempt and dead-letters
// it once it has run out of them.
func (r *Relay) deadLetterRefused(ctx context.Context, f driver.Fence, id int64, what string, cause error) bool {
	reason := truncate(fmt.Sprintf("dead-lettered: %s: %v", what, cause))
	var res driver.FailResult
	err := r.retryDB(ctx, f, 1, "dead-letter a refused event", func(ctx context.Context) (err error) {
		res, err = r.drv.MarkFailed(ctx, f, r.cfg.MaxAttempts, []driver.Failure{{ID: id, Error: reason, Permanent: true}})
		return err
	})
	if err != nil || len(res.Dead) == 0 {
		if err != nil {
			r.log.Error("could not dead-letter an event whose mark the database refused; it stays leased until its lease expires",
				slog.Int64("event_id", id), slog.String("reason", reason), slog.String("error", err.Error()))
		}
		return false // or lost the lease: another relay owns the event
	}
	e := Event{ID: id, Status: StatusFailed, LastError: reason, LockedBy: f.RelayID}
	// The hooks get the stored row (type, aggregate, attempts); one more
	// read, on a path that is one statement per event already.
	if row, err := r.drv.GetEvent(ctx, id); err == nil {
		e = eventFromRow(&row)
	}
	r.deadLetter(ctx, e, Permanent(errors.New(reason)))
	return true
}
