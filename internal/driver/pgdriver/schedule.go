package pgdriver

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/driver"
)

// AcquireLease takes or renews a job lease with one conditional upsert: the
// update applies only when the caller already holds the row or the row has
// expired, both judged by the database clock, so two relays racing for it
// cannot both win (the row lock orders them and the second one's WHERE
// sees the first one's row). No row returned means another relay holds it.
func (d *Driver) AcquireLease(ctx context.Context, p driver.LeaseParams) (bool, error) {
	t := d.ident("outbox_leases")
	var won bool
	err := d.pool.QueryRow(ctx, `INSERT INTO `+t+` AS l (name, holder, expires_at, acquired_at)
VALUES ($1, $2, now() + $3::bigint * interval '1 millisecond', now())
ON CONFLICT (name) DO UPDATE
SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at,
    acquired_at = CASE WHEN l.holder = EXCLUDED.holder THEN l.acquired_at ELSE EXCLUDED.acquired_at END
WHERE l.holder = EXCLUDED.holder OR l.expires_at <= now()
RETURNING true`, p.Name, p.Holder, p.TTL.Milliseconds()).Scan(&won)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, wrap(err)
	}
	return won, nil
}

// ReleaseLease deletes the lease row if holder holds it.
func (d *Driver) ReleaseLease(ctx context.Context, name, holder string) error {
	_, err := d.pool.Exec(ctx, `DELETE FROM `+d.ident("outbox_leases")+` WHERE name = $1 AND holder = $2`, name, holder)
	return wrap(err)
}

// ScheduleDeadLetterRetries stamps the retry time on one batch of failed
// events without one. The select reads
// outbox_events_dead_letter_unscheduled_idx in its order (retry count, ID),
// so events out of slow retries sort after the range and are never read;
// SKIP LOCKED passes over rows an operator's requeue holds.
func (d *Driver) ScheduleDeadLetterRetries(ctx context.Context, p driver.DeadLetterRetryParams) (int64, error) {
	tag, err := d.pool.Exec(ctx, scheduleDeadLetterSQL(d.table), p.After.Milliseconds(), p.MaxRetries, p.BatchSize)
	if err != nil {
		return 0, wrap(err)
	}
	return tag.RowsAffected(), nil
}

// RetryDeadLetters sends one batch of failed events whose retry time came
// back to pending, as a requeue does, counting the slow retry; it reads
// outbox_events_dead_letter_due_idx in due order.
func (d *Driver) RetryDeadLetters(ctx context.Context, p driver.DeadLetterRetryParams) (int64, error) {
	tag, err := d.pool.Exec(ctx, retryDeadLetterSQL(d.table), p.MaxRetries, p.BatchSize)
	if err != nil {
		return 0, wrap(err)
	}
	return tag.RowsAffected(), nil
}

// DeadLetterRetryStats counts the scheduled slow retries; it reads
// outbox_events_dead_letter_due_idx only.
func (d *Driver) DeadLetterRetryStats(ctx context.Context) (driver.DeadLetterRetryStats, error) {
	var (
		s   driver.DeadLetterRetryStats
		due *time.Time
	)
	err := d.pool.QueryRow(ctx, `SELECT count(*), min(dead_letter_retry_at) FROM `+d.table+`
WHERE status = 'failed' AND dead_letter_retry_at IS NOT NULL`).Scan(&s.Waiting, &due)
	if err != nil {
		return s, wrap(err)
	}
	if due != nil {
		s.NextDue = due.UTC()
	}
	return s, nil
}

// scheduleDeadLetterSQL stamps the retry time ($1 milliseconds from now)
// on up to $3 failed events without one that had fewer than $2 slow
// retries. id = ANY(ARRAY(…)) bounds the batch exactly and keeps the index
// plan under a generic plan, as the claim does; the literal status keeps
// the partial index usable.
func scheduleDeadLetterSQL(t string) string {
	return `UPDATE ` + t + `
SET dead_letter_retry_at = now() + $1::bigint * interval '1 millisecond'
WHERE id = ANY(ARRAY(
    SELECT id FROM ` + t + `
    WHERE status = 'failed' AND dead_letter_retries < $2 AND dead_letter_retry_at IS NULL
    ORDER BY dead_letter_retries, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)) AND status = 'failed'`
}

// retryDeadLetterSQL requeues up to $2 failed events whose retry time has
// come and that had fewer than $1 slow retries, shaped as
// scheduleDeadLetterSQL. It resets the event as an operator's requeue does
// (requeueSet), counting the slow retry.
func retryDeadLetterSQL(t string) string {
	return `UPDATE ` + t + `
` + requeueSet + `, dead_letter_retries = dead_letter_retries + 1
WHERE id = ANY(ARRAY(
    SELECT id FROM ` + t + `
    WHERE status = 'failed' AND dead_letter_retries < $1 AND dead_letter_retry_at <= now()
    ORDER BY dead_letter_retry_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)) AND status = 'failed'`
}
