package sqldriver

import (
	"context"
	"fmt"
	"strings"

	"github.com/outboxkit/outbox/internal/driver"
)

// filterSQL is a WHERE clause under construction. Values are bound; only a
// status, checked against the known ones, is a literal, so the status's
// index serves it.
type filterSQL struct {
	src   driver.Filter
	where []string
	args  []any
}

func (f *filterSQL) add(cond string, v any) {
	f.where = append(f.where, cond)
	f.args = append(f.args, v)
}

func (f *filterSQL) clause() string {
	if len(f.where) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(f.where, " AND ")
}

func buildFilter(flt driver.Filter) (*filterSQL, error) {
	f := &filterSQL{src: flt}
	if flt.Status != "" {
		switch flt.Status {
		case driver.StatusPending, driver.StatusProcessing, driver.StatusProcessed, driver.StatusFailed:
			f.where = append(f.where, "status = '"+flt.Status+"'")
		default:
			return nil, fmt.Errorf("unknown status %q", flt.Status)
		}
	}
	if flt.EventType != "" {
		f.add("event_type = ?", flt.EventType)
	}
	if flt.AggregateType != "" {
		f.add("aggregate_type = ?", flt.AggregateType)
	}
	if flt.AggregateID != "" {
		f.add("aggregate_id = ?", flt.AggregateID)
	}
	if flt.IdempotencyKey != "" {
		f.add("idempotency_key = ?", flt.IdempotencyKey)
	}
	return f, nil
}

// times adds the filter's timestamp bounds, rendered as the dialect stores
// them.
func (f *filterSQL) times(d Dialect) {
	if !f.src.CreatedAfter.IsZero() {
		f.add("created_at >= ?", d.FormatTime(f.src.CreatedAfter))
	}
	if !f.src.CreatedBefore.IsZero() {
		f.add("created_at < ?", d.FormatTime(f.src.CreatedBefore))
	}
	if f.src.MinAttempts > 0 {
		f.add("attempts >= ?", f.src.MinAttempts)
	}
}

func (d *Driver) filter(flt driver.Filter) (*filterSQL, error) {
	f, err := buildFilter(flt)
	if err != nil {
		return nil, err
	}
	f.times(d.d)
	return f, nil
}

// SearchEvents lists matching events newest first, keyset-paged on id: the
// scan walks the primary key backwards from BeforeID and stops at the
// page's end.
func (d *Driver) SearchEvents(ctx context.Context, p driver.SearchParams) ([]driver.Event, error) {
	f, err := d.filter(p.Filter)
	if err != nil {
		return nil, err
	}
	if p.BeforeID > 0 {
		f.add("id < ?", p.BeforeID)
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	events, err := queryEvents(ctx, d.db, limit, `SELECT `+d.cols+` FROM `+d.table+f.clause()+` ORDER BY id DESC LIMIT ?`,
		append(f.args, limit)...)
	return events, d.wrap(err)
}

// CountEvents counts matching events.
func (d *Driver) CountEvents(ctx context.Context, flt driver.Filter) (int64, error) {
	f, err := d.filter(flt)
	if err != nil {
		return 0, err
	}
	var n int64
	err = d.db.QueryRowContext(ctx, `SELECT count(*) FROM `+d.table+f.clause(), f.args...).Scan(&n)
	return n, d.wrap(err)
}

// RequeueMatching requeues one keyset batch of matching failed or processed
// events.
func (d *Driver) RequeueMatching(ctx context.Context, flt driver.Filter, afterID int64, limit int) (int64, int64, error) {
	if flt.Status != driver.StatusFailed && flt.Status != driver.StatusProcessed {
		return 0, afterID, fmt.Errorf("cannot requeue %q events: only failed or processed", flt.Status)
	}
	f, err := d.filter(flt)
	if err != nil {
		return 0, afterID, err
	}
	f.add("id > ?", afterID)
	ids, err := d.requeueSelected(ctx, `SELECT id FROM `+d.table+f.clause()+`
ORDER BY id
LIMIT ?`+d.d.ForUpdateSkipLocked(), append(f.args, limit)...)
	if err != nil {
		return 0, afterID, err
	}
	return int64(len(ids)), lastID(afterID, ids), nil
}

// Discard dead-letters pending events, and marks failed ones discarded,
// out of slow retries (driver.DiscardedRetries) either way: a discarded
// dead head no longer holds back its aggregate's later events in ordered
// mode. Processing ones are left to their relay; failed ones already
// discarded are left as they are.
func (d *Driver) Discard(ctx context.Context, ids []int64, reason string) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var changed []int64
	err := d.inTx(ctx, func(tx Tx) error {
		var err error
		changed, err = queryIDs(ctx, tx, `SELECT id FROM `+d.table+d.d.ByID()+`
WHERE id IN (`+placeholders(len(ids))+`)
  AND (status = 'pending' OR (status = 'failed' AND dead_letter_retries <> ?))`+d.d.ForUpdate(),
			append(int64Args(ids), driver.DiscardedRetries)...)
		if err != nil || len(changed) == 0 {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE `+d.table+d.d.ByID()+`
SET status = 'failed', last_error = ?, locked_until = NULL, updated_at = `+d.d.Now()+`, dead_letter_retries = ?
WHERE id IN (`+placeholders(len(changed))+`)`, append([]any{reason, driver.DiscardedRetries}, int64Args(changed)...)...)
		return err
	})
	return changed, err
}

// SetMaxAttempts sets one event's max_attempts (0 for the relay's default).
func (d *Driver) SetMaxAttempts(ctx context.Context, id int64, maxAttempts int) (driver.Event, error) {
	var v any
	if maxAttempts > 0 {
		v = maxAttempts
	}
	if _, err := d.db.ExecContext(ctx, `UPDATE `+d.table+`
SET max_attempts = ?, updated_at = `+d.d.Now()+`
WHERE id = ?`, v, id); err != nil {
		return driver.Event{}, d.wrap(err)
	}
	return d.GetEvent(ctx, id)
}

// Leases groups processing events by relay, from the processing index.
func (d *Driver) Leases(ctx context.Context) ([]driver.Lease, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT coalesce(locked_by, ''), count(*), min(locked_until), max(locked_until), `+d.d.Now()+`
FROM `+d.table+`
WHERE status = 'processing'
GROUP BY coalesce(locked_by, '')
ORDER BY 1`)
	if err != nil {
		return nil, d.wrap(err)
	}
	defer func() { _ = rows.Close() }()
	var leases []driver.Lease
	for rows.Next() {
		var (
			l                driver.Lease
			first, last, now Time
		)
		if err := rows.Scan(&l.RelayID, &l.Events, &first, &last, &now); err != nil {
			return nil, err
		}
		l.FirstEnd, l.LastEnd, l.Now = first.Time, last.Time, now.Time
		leases = append(leases, l)
	}
	return leases, d.wrap(rows.Err())
}

// Sample reads the cheap counts and the ID counter.
func (d *Driver) Sample(ctx context.Context) (driver.Sample, error) {
	var s driver.Sample
	var err error
	if s.Inserted, err = d.d.InsertedCount(ctx, d.db, d.schema); err != nil {
		return s, d.wrap(err)
	}
	s.Stats, err = d.EstimateStats(ctx)
	return s, err
}
