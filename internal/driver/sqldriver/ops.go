package sqldriver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

// Stats counts events per status. The oldest due pending event and the
// clock are read in the same statement, so the lag is the database's.
func (d *Driver) Stats(ctx context.Context) (driver.Stats, error) {
	return d.stats(ctx, false)
}

// EstimateStats counts pending, processing and failed events exactly and
// takes processed from the database's row estimate.
func (d *Driver) EstimateStats(ctx context.Context) (driver.Stats, error) {
	return d.stats(ctx, true)
}

func (d *Driver) stats(ctx context.Context, estimate bool) (driver.Stats, error) {
	var (
		s           driver.Stats
		oldest, now Time
	)
	processed := `(SELECT count(*) FROM ` + d.table + ` WHERE status = 'processed')`
	if estimate {
		processed = "0"
	}
	err := d.db.QueryRowContext(ctx, `SELECT
    (SELECT count(*) FROM `+d.table+` WHERE status = 'pending'),
    (SELECT count(*) FROM `+d.table+` WHERE status = 'processing'),
    `+processed+`,
    (SELECT count(*) FROM `+d.table+` WHERE status = 'failed'),
    (SELECT min(available_at) FROM `+d.table+` WHERE status = 'pending' AND available_at <= `+d.d.Now()+`),
    `+d.d.Now()).Scan(&s.Pending, &s.Processing, &s.Processed, &s.Failed, &oldest, &now)
	if err != nil {
		return s, d.wrap(err)
	}
	if !oldest.IsZero() {
		s.OldestPendingAge = max(now.Sub(oldest.Time), 0)
	}
	if estimate {
		rows, err := d.d.EstimateRows(ctx, d.db, d.schema)
		if err != nil {
			return s, d.wrap(err)
		}
		s.Processed = max(rows-s.Pending-s.Processing-s.Failed, 0)
	}
	return s, nil
}

// ListEvents lists events newest first, with keyset paging on id.
func (d *Driver) ListEvents(ctx context.Context, p driver.ListParams) ([]driver.Event, error) {
	f, err := buildFilter(driver.Filter{Status: p.Status, EventType: p.EventType, AggregateType: p.AggregateType, AggregateID: p.AggregateID})
	if err != nil {
		return nil, err
	}
	return d.SearchEvents(ctx, driver.SearchParams{Filter: f.src, BeforeID: p.BeforeID, Limit: p.Limit})
}

// GetEvent returns one event.
func (d *Driver) GetEvent(ctx context.Context, id int64) (driver.Event, error) {
	events, err := queryEvents(ctx, d.db, 1, `SELECT `+d.cols+` FROM `+d.table+` WHERE id = ?`, id)
	if err != nil {
		return driver.Event{}, d.wrap(err)
	}
	if len(events) == 0 {
		return driver.Event{}, fmt.Errorf("%w: %d", driver.ErrNotFound, id)
	}
	return events[0], nil
}

// requeueSet is the assignment that sends an event back to pending, due
// now, with its attempts (and lease expiries) reset and its last error
// cleared: an operator's retry or replay starts the event afresh, so an
// event that then succeeds shows no stale error.
func (d *Driver) requeueSet() string {
	return `SET status = 'pending', attempts = 0, lease_expiries = 0, last_error = NULL, dead_letter_retry_at = NULL, available_at = ` + d.d.Now() + `, locked_until = NULL,
    processed_at = NULL, updated_at = ` + d.d.Now()
}

// requeueSelected runs sel (which returns IDs, locking them) and requeues
// those IDs, in one transaction; it returns them in ID order.
func (d *Driver) requeueSelected(ctx context.Context, sel string, args ...any) ([]int64, error) {
	var ids []int64
	err := d.inTx(ctx, func(tx Tx) error {
		var err error
		if ids, err = queryIDs(ctx, tx, sel, args...); err != nil || len(ids) == 0 {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE `+d.table+d.d.ByID()+` `+d.requeueSet()+`
WHERE id IN (`+placeholders(len(ids))+`)`, int64Args(ids)...)
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}

// Requeue sets the given events whose status is one of from back to
// pending.
func (d *Driver) Requeue(ctx context.Context, ids []int64, from []string) ([]int64, error) {
	if len(ids) == 0 || len(from) == 0 {
		return nil, nil
	}
	args := append(int64Args(ids), stringArgs(from)...)
	return d.requeueSelected(ctx, `SELECT id FROM `+d.table+d.d.ByID()+`
WHERE id IN (`+placeholders(len(ids))+`) AND status IN (`+placeholders(len(from))+`)`+d.d.ForUpdate(), args...)
}

// RequeueStatus requeues one keyset batch of events with the given status,
// walking up the primary key so a long requeue ends even while the relay
// fails events again.
func (d *Driver) RequeueStatus(ctx context.Context, status string, afterID int64, limit int) (int64, int64, error) {
	if status != driver.StatusFailed && status != driver.StatusProcessed {
		return 0, afterID, fmt.Errorf("cannot requeue all %s events: only failed or processed", status)
	}
	ids, err := d.requeueSelected(ctx, `SELECT id FROM `+d.table+`
WHERE status = '`+status+`' AND id > ?
ORDER BY id
LIMIT ?`+d.d.ForUpdateSkipLocked(), afterID, limit)
	if err != nil {
		return 0, afterID, err
	}
	return int64(len(ids)), lastID(afterID, ids), nil
}

func lastID(after int64, ids []int64) int64 {
	for _, id := range ids {
		after = max(after, id)
	}
	return after
}

// PurgeBatch deletes one batch of finished events, oldest IDs first, in a
// short transaction.
func (d *Driver) PurgeBatch(ctx context.Context, p driver.PurgeParams) (int64, error) {
	var ts string
	switch p.Status {
	case driver.StatusProcessed:
		ts = "processed_at"
	case driver.StatusFailed:
		ts = "updated_at"
	default:
		return 0, errors.New("purge deletes processed or failed events only")
	}
	return d.deleteSelected(ctx, d.table, `status = '`+p.Status+`'`, `SELECT id FROM `+d.table+`
WHERE status = '`+p.Status+`' AND `+ts+` < `+d.d.NowPlusMillis()+`
ORDER BY id
LIMIT ?`+d.d.ForUpdateSkipLocked(), -p.OlderThan.Milliseconds(), p.BatchSize)
}

// PurgeArchiveBatch deletes one batch of archived events processed more
// than olderThan ago.
func (d *Driver) PurgeArchiveBatch(ctx context.Context, olderThan time.Duration, batchSize int) (int64, error) {
	return d.deleteSelected(ctx, d.archive, `processed_at IS NOT NULL`, `SELECT id FROM `+d.archive+`
WHERE processed_at < `+d.d.NowPlusMillis()+`
ORDER BY processed_at
LIMIT ?`+d.d.ForUpdateSkipLocked(), -olderThan.Milliseconds(), batchSize)
}

// deleteSelected deletes from table the IDs sel returns, in one
// transaction: MySQL cannot delete with a LIMIT-ed subquery on the same
// table. The delete also tests cond, a condition the selected rows meet
// on a column outside the primary key (see Dialect.ByID).
func (d *Driver) deleteSelected(ctx context.Context, table, cond, sel string, args ...any) (int64, error) {
	return d.changeSelected(ctx, d.d.DeleteByID(table), nil, cond, sel, args...)
}

// changeSelected runs head (a DELETE or UPDATE … SET of the table, with
// headArgs) on the IDs sel returns that still meet cond, in one
// transaction, and returns how many rows it changed.
func (d *Driver) changeSelected(ctx context.Context, head string, headArgs []any, cond, sel string, selArgs ...any) (int64, error) {
	var n int64
	err := d.inTx(ctx, func(tx Tx) error {
		ids, err := queryIDs(ctx, tx, sel, selArgs...)
		if err != nil || len(ids) == 0 {
			return err
		}
		args := append(append([]any{}, headArgs...), int64Args(ids)...)
		res, err := tx.ExecContext(ctx, head+` WHERE id IN (`+placeholders(len(ids))+`) AND `+cond, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
