package sqldriver

import (
	"context"

	"github.com/outboxkit/outbox/internal/driver"
)

// AcquireLease takes or renews a job lease with the dialect's conditional
// upsert (Dialect.LeaseUpsert), then reads the holder back in the same
// transaction: the upsert locks the row (SQLite: the transaction holds the
// write lock), so the holder read is the outcome of this call.
func (d *Driver) AcquireLease(ctx context.Context, p driver.LeaseParams) (bool, error) {
	t := d.d.Table(d.schema, "outbox_leases")
	var holder string
	err := d.inTx(ctx, func(tx Tx) error {
		if _, err := tx.ExecContext(ctx, d.d.LeaseUpsert(t), p.Name, p.Holder, p.TTL.Milliseconds()); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT holder FROM `+t+` WHERE name = ?`, p.Name).Scan(&holder)
	})
	if err != nil {
		return false, err
	}
	return holder == p.Holder, nil
}

// ReleaseLease deletes the lease row if holder holds it.
func (d *Driver) ReleaseLease(ctx context.Context, name, holder string) error {
	_, err := d.exec(ctx, `DELETE FROM `+d.d.Table(d.schema, "outbox_leases")+` WHERE name = ? AND holder = ?`, name, holder)
	return err
}

// ScheduleDeadLetterRetries stamps the retry time on one batch of failed
// events without one: the IDs first, locked, then exactly those rows, in
// one transaction (see the package comment). The select reads
// outbox_events_dead_letter_unscheduled_idx in its order.
func (d *Driver) ScheduleDeadLetterRetries(ctx context.Context, p driver.DeadLetterRetryParams) (int64, error) {
	return d.updateSelected(ctx, `SET dead_letter_retry_at = `+d.d.NowPlusMillis(), []any{p.After.Milliseconds()},
		`SELECT id FROM `+d.table+`
WHERE status = 'failed' AND dead_letter_retry_at IS NULL AND dead_letter_retries < ?
ORDER BY dead_letter_retries, id
LIMIT ?`+d.d.ForUpdateSkipLocked(), p.MaxRetries, p.BatchSize)
}

// RetryDeadLetters sends one batch of failed events whose retry time came
// back to pending, as a requeue does, counting the slow retry; the select
// reads outbox_events_dead_letter_due_idx in due order (on MySQL the
// leading columns of outbox_events_dead_letter_unscheduled_idx).
func (d *Driver) RetryDeadLetters(ctx context.Context, p driver.DeadLetterRetryParams) (int64, error) {
	return d.updateSelected(ctx, d.requeueSet()+`, dead_letter_retries = dead_letter_retries + 1`, nil,
		`SELECT id FROM `+d.table+`
WHERE status = 'failed' AND dead_letter_retry_at <= `+d.d.Now()+` AND dead_letter_retries < ?
ORDER BY dead_letter_retry_at
LIMIT ?`+d.d.ForUpdateSkipLocked(), p.MaxRetries, p.BatchSize)
}

// updateSelected applies set (with setArgs) to the failed rows among the
// IDs sel returns, in one transaction, and returns how many it changed.
func (d *Driver) updateSelected(ctx context.Context, set string, setArgs []any, sel string, selArgs ...any) (int64, error) {
	return d.changeSelected(ctx, `UPDATE `+d.table+d.d.ByID()+` `+set, setArgs, `status = 'failed'`, sel, selArgs...)
}

// DeadLetterRetryStats counts the scheduled slow retries.
func (d *Driver) DeadLetterRetryStats(ctx context.Context) (driver.DeadLetterRetryStats, error) {
	var (
		s   driver.DeadLetterRetryStats
		due Time
	)
	err := d.db.QueryRowContext(ctx, `SELECT count(*), min(dead_letter_retry_at) FROM `+d.table+`
WHERE status = 'failed' AND dead_letter_retry_at IS NOT NULL`).Scan(&s.Waiting, &due)
	if err != nil {
		return s, d.wrap(err)
	}
	s.NextDue = due.Time
	return s, nil
}
