package pgdriver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/driver"
)

// Stats counts events per status.
func (d *Driver) Stats(ctx context.Context) (driver.Stats, error) {
	return d.stats(ctx, d.q.stats)
}

// EstimateStats counts events per status, estimating processed.
func (d *Driver) EstimateStats(ctx context.Context) (driver.Stats, error) {
	s, err := d.stats(ctx, d.q.estimateStats)
	if err != nil {
		return s, err
	}
	// reltuples counts every row; the other statuses are exact.
	s.Processed = max(s.Processed-s.Pending-s.Processing-s.Failed, 0)
	return s, nil
}

func (d *Driver) stats(ctx context.Context, sqlText string) (driver.Stats, error) {
	var s driver.Stats
	var age float64
	err := d.pool.QueryRow(ctx, sqlText).Scan(&s.Pending, &s.Processing, &s.Processed, &s.Failed, &age)
	if err != nil {
		return s, wrap(err)
	}
	s.OldestPendingAge = time.Duration(age * float64(time.Second))
	return s, nil
}

// ListEvents lists events newest first, with keyset paging on id.
func (d *Driver) ListEvents(ctx context.Context, p driver.ListParams) ([]driver.Event, error) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	if p.Status != "" {
		add("status = ?", p.Status)
	}
	if p.EventType != "" {
		add("event_type = ?", p.EventType)
	}
	if p.AggregateType != "" {
		add("aggregate_type = ?", p.AggregateType)
	}
	if p.AggregateID != "" {
		add("aggregate_id = ?", p.AggregateID)
	}
	if p.BeforeID > 0 {
		add("id < ?", p.BeforeID)
	}
	sqlText := d.q.listPrefix
	if len(where) > 0 {
		sqlText += " WHERE " + strings.Join(where, " AND ")
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	args = append(args, limit)
	sqlText += " ORDER BY id DESC LIMIT $" + strconv.Itoa(len(args))
	rows, err := d.pool.Query(ctx, sqlText, args...)
	if err != nil {
		return nil, wrap(err)
	}
	events, err := collectEvents(rows, limit)
	return events, wrap(err)
}

// GetEvent returns one event.
func (d *Driver) GetEvent(ctx context.Context, id int64) (driver.Event, error) {
	rows, err := d.pool.Query(ctx, d.q.get, id)
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

// Requeue sets events with one of the given statuses back to pending.
func (d *Driver) Requeue(ctx context.Context, ids []int64, from []string) ([]int64, error) {
	rows, err := d.pool.Query(ctx, d.q.requeue, ids, from)
	if err != nil {
		return nil, wrap(err)
	}
	changed, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	return changed, wrap(err)
}

// RequeueStatus requeues one keyset batch of events with the given status.
func (d *Driver) RequeueStatus(ctx context.Context, status string, afterID int64, limit int) (int64, int64, error) {
	sqlText, ok := d.q.requeueStatus[status]
	if !ok {
		return 0, afterID, fmt.Errorf("cannot requeue all %s events: only failed or processed", status)
	}
	rows, err := d.pool.Query(ctx, sqlText, afterID, limit)
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

// PurgeBatch deletes one batch of finished events.
func (d *Driver) PurgeBatch(ctx context.Context, p driver.PurgeParams) (int64, error) {
	sqlText, ok := d.q.purge[p.Status]
	if !ok {
		return 0, errors.New("purge deletes processed or failed events only")
	}
	tag, err := d.pool.Exec(ctx, sqlText, p.OlderThan.Milliseconds(), p.BatchSize)
	if err != nil {
		return 0, wrap(err)
	}
	return tag.RowsAffected(), nil
}

// PurgeArchiveBatch deletes one batch of old archived events.
func (d *Driver) PurgeArchiveBatch(ctx context.Context, olderThan time.Duration, batchSize int) (int64, error) {
	tag, err := d.pool.Exec(ctx, d.q.purgeArchive, olderThan.Milliseconds(), batchSize)
	if err != nil {
		return 0, wrap(err)
	}
	return tag.RowsAffected(), nil
}
