package pgdriver

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/driver"
)

// The admin API's statements. They are built per call from a filter, with
// every value bound as a parameter; only a status, checked against the known
// ones, is written as a literal so that a generic plan can still use the
// status's partial index.

// filterSQL is a WHERE clause under construction.
type filterSQL struct {
	where []string
	args  []any
}

// add appends cond, whose ? stands for v's parameter.
func (f *filterSQL) add(cond string, v any) {
	f.args = append(f.args, v)
	f.where = append(f.where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(f.args))))
}

func (f *filterSQL) clause() string {
	if len(f.where) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(f.where, " AND ")
}

// param appends v and returns its placeholder.
func (f *filterSQL) param(v any) string {
	f.args = append(f.args, v)
	return "$" + strconv.Itoa(len(f.args))
}

func buildFilter(f driver.Filter) (*filterSQL, error) {
	var s filterSQL
	if f.Status != "" {
		switch f.Status {
		case driver.StatusPending, driver.StatusProcessing, driver.StatusProcessed, driver.StatusFailed:
			s.where = append(s.where, "status = '"+f.Status+"'")
		default:
			return nil, fmt.Errorf("unknown status %q", f.Status)
		}
	}
	if f.EventType != "" {
		s.add("event_type = ?", f.EventType)
	}
	if f.AggregateType != "" {
		s.add("aggregate_type = ?", f.AggregateType)
	}
	if f.AggregateID != "" {
		s.add("aggregate_id = ?", f.AggregateID)
	}
	if f.IdempotencyKey != "" {
		// Served by outbox_events_idempotency_key_idx: equality implies
		// the index's IS NOT NULL predicate.
		s.add("idempotency_key = ?", f.IdempotencyKey)
	}
	if !f.CreatedAfter.IsZero() {
		s.add("created_at >= ?", f.CreatedAfter)
	}
	if !f.CreatedBefore.IsZero() {
		s.add("created_at < ?", f.CreatedBefore)
	}
	if f.MinAttempts > 0 {
		s.add("attempts >= ?", f.MinAttempts)
	}
	return &s, nil
}

// SearchEvents lists matching events newest first, with keyset paging on
// id. Without a status or key to narrow it, the scan walks the primary key
// backwards from BeforeID and stops at the page's end, so a page costs about
// as many rows as it skips, never the whole table.
func (d *Driver) SearchEvents(ctx context.Context, p driver.SearchParams) ([]driver.Event, error) {
	f, err := buildFilter(p.Filter)
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
	sqlText := d.q.listPrefix + f.clause() + " ORDER BY id DESC LIMIT " + f.param(limit)
	rows, err := d.pool.Query(ctx, sqlText, f.args...)
	if err != nil {
		return nil, wrap(err)
	}
	events, err := collectEvents(rows, limit)
	return events, wrap(err)
}

// CountEvents counts matching events. Only bulk actions call it (for their
// progress), since without a status it reads the whole history.
func (d *Driver) CountEvents(ctx context.Context, flt driver.Filter) (int64, error) {
	f, err := buildFilter(flt)
	if err != nil {
		return 0, err
	}
	var n int64
	err = d.pool.QueryRow(ctx, `SELECT count(*) FROM `+d.table+f.clause(), f.args...).Scan(&n)
	return n, wrap(err)
}

// RequeueMatching requeues one keyset batch of matching events. Like
// RequeueStatus it walks up the primary key so that it ends even while the
// relay fails events again, and locks with SKIP LOCKED so it never waits on
// a relay.
func (d *Driver) RequeueMatching(ctx context.Context, flt driver.Filter, afterID int64, limit int) (int64, int64, error) {
	if flt.Status != driver.StatusFailed && flt.Status != driver.StatusProcessed {
		return 0, afterID, fmt.Errorf("cannot requeue %q events: only failed or processed", flt.Status)
	}
	f, err := buildFilter(flt)
	if err != nil {
		return 0, afterID, err
	}
	f.add("id > ?", afterID)
	sqlText := `WITH sel AS MATERIALIZED (
    SELECT id FROM ` + d.table + f.clause() + `
    ORDER BY id
    LIMIT ` + f.param(limit) + `
    FOR UPDATE SKIP LOCKED
)
UPDATE ` + d.table + ` AS e
` + requeueSet + `
FROM sel
WHERE e.id = sel.id
RETURNING e.id`
	rows, err := d.pool.Query(ctx, sqlText, f.args...)
	if err != nil {
		return 0, afterID, wrap(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, afterID, wrap(err)
	}
	last := afterID
	for _, id := range ids {
		last = max(last, id)
	}
	return int64(len(ids)), last, nil
}

// Discard dead-letters pending events, and marks failed ones discarded,
// out of slow retries (driver.DiscardedRetries) either way: a discarded
// dead head no longer holds back its aggregate's later events in ordered
// mode. Processing events are left alone: their relay is publishing them
// right now; so are failed events already discarded.
func (d *Driver) Discard(ctx context.Context, ids []int64, reason string) ([]int64, error) {
	rows, err := d.pool.Query(ctx, `UPDATE `+d.table+`
SET status = 'failed', last_error = $2, locked_until = NULL, updated_at = now(), dead_letter_retries = $3
WHERE id = ANY($1::bigint[])
  AND (status = 'pending' OR (status = 'failed' AND dead_letter_retries <> $3))
RETURNING id`, ids, reason, driver.DiscardedRetries)
	if err != nil {
		return nil, wrap(err)
	}
	changed, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	return changed, wrap(err)
}

// SetMaxAttempts sets one event's max_attempts. The relay reads it from the
// row when it records the next failure, so the change applies at once.
func (d *Driver) SetMaxAttempts(ctx context.Context, id int64, maxAttempts int) (driver.Event, error) {
	rows, err := d.pool.Query(ctx, `UPDATE `+d.table+`
SET max_attempts = nullif($2::integer, 0), updated_at = now()
WHERE id = $1
RETURNING `+eventColumns(""), id, maxAttempts)
	if err != nil {
		return driver.Event{}, wrap(err)
	}
	events, err := collectEvents(rows, 1)
	if err != nil {
		return driver.Event{}, wrap(err)
	}
	if len(events) == 0 {
		return driver.Event{}, fmt.Errorf("%w: %d", driver.ErrNotFound, id)
	}
	return events[0], nil
}

// Leases groups processing events by relay. It reads only
// outbox_events_processing_idx's rows: the events in flight.
func (d *Driver) Leases(ctx context.Context) ([]driver.Lease, error) {
	rows, err := d.pool.Query(ctx, `SELECT coalesce(locked_by, ''), count(*), min(locked_until), max(locked_until), now()
FROM `+d.table+`
WHERE status = 'processing'
GROUP BY 1
ORDER BY 1`)
	if err != nil {
		return nil, wrap(err)
	}
	leases, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (driver.Lease, error) {
		var (
			l           driver.Lease
			first, last *time.Time
		)
		err := row.Scan(&l.RelayID, &l.Events, &first, &last, &l.Now)
		if first != nil {
			l.FirstEnd = *first
		}
		if last != nil {
			l.LastEnd = *last
		}
		return l, err
	})
	return leases, wrap(err)
}

// Sample reads the cheap counts (as EstimateStats does) and the table's
// running insert counter from the statistics system, which costs nothing to
// read: no statement here scans processed rows.
func (d *Driver) Sample(ctx context.Context) (driver.Sample, error) {
	var s driver.Sample
	err := d.pool.QueryRow(ctx, `SELECT pg_stat_get_tuples_inserted($1::text::regclass)`, d.table).Scan(&s.Inserted)
	if err != nil {
		return s, wrap(err)
	}
	s.Stats, err = d.EstimateStats(ctx)
	return s, err
}
