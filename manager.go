package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

// Manager defaults.
const (
	// ListLimitDefault is ListParams.Limit's default page size.
	ListLimitDefault = 50
	// PurgeBatchSizeDefault is how many rows one purge DELETE removes.
	PurgeBatchSizeDefault = 1000
	// RequeueBatchSizeDefault is how many events one RetryAllFailed
	// statement changes.
	RequeueBatchSizeDefault = 1000
)

// Manager runs the operator's actions on an outbox table: counts, listing,
// retrying dead-lettered events, replaying delivered ones and purging
// history. The CLI and the admin API are built on it.
type Manager struct {
	db  Database
	drv driver.Driver
}

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	// Schema holds outbox_events. Defaults to SchemaDefault.
	Schema string
}

// NewManager returns a Manager for the outbox table in db.
func NewManager(db Database, cfg ManagerConfig) *Manager {
	return &Manager{db: db, drv: db.Driver(schemaOrDefault(cfg.Schema))}
}

// Stats are event counts per status and the publisher's lag.
type Stats struct {
	Pending    int64 `json:"pending"`
	Processing int64 `json:"processing"`
	Processed  int64 `json:"processed"`
	Failed     int64 `json:"failed"`
	// OldestPendingAge is how long the oldest due pending event has waited:
	// the relay's lag. Zero when nothing is due.
	OldestPendingAge time.Duration `json:"-"`
	// DeadLetterRetry describes the failed events waiting for a slow retry
	// (RelayConfig.DeadLetterRetry).
	DeadLetterRetry DeadLetterRetryStats `json:"dead_letter_retry"`
}

// Ping checks that the database answers and the outbox table exists; it
// returns an error wrapping ErrNoTable when it does not.
func (m *Manager) Ping(ctx context.Context) error { return m.drv.Ping(ctx) }

// Stats counts events per status.
func (m *Manager) Stats(ctx context.Context) (Stats, error) {
	s, err := m.drv.Stats(ctx)
	if err != nil {
		return Stats{}, err
	}
	return m.withDeadLetterRetry(ctx, s)
}

// withDeadLetterRetry is s with the slow retries' counts added.
func (m *Manager) withDeadLetterRetry(ctx context.Context, s driver.Stats) (Stats, error) {
	out := Stats{Pending: s.Pending, Processing: s.Processing, Processed: s.Processed, Failed: s.Failed,
		OldestPendingAge: s.OldestPendingAge}
	var err error
	out.DeadLetterRetry, err = m.DeadLetterRetryStats(ctx)
	return out, err
}

// EstimateStats is Stats without scanning the history: pending, processing
// and failed are exact, Processed is the database's estimate of the
// processed rows (PostgreSQL's planner statistics, refreshed by autovacuum
// and ANALYZE; InnoDB's row estimate on MySQL; on SQLite a count of the
// table, cheap at the sizes SQLite serves). Use it where Stats runs often,
// such as on metrics scrapes.
func (m *Manager) EstimateStats(ctx context.Context) (Stats, error) {
	s, err := m.drv.EstimateStats(ctx)
	if err != nil {
		return Stats{}, err
	}
	return m.withDeadLetterRetry(ctx, s)
}

// ListParams filters an event listing. Zero fields do not filter.
type ListParams struct {
	Status        Status
	EventType     string
	AggregateType string
	AggregateID   string
	// BeforeID pages backwards: only events with a smaller ID. Pass the
	// last ID of the previous page.
	BeforeID int64
	// Limit is the page size. Defaults to ListLimitDefault; at most
	// ListLimitMax.
	Limit int
}

// ListEvents returns events matching p, newest first.
func (m *Manager) ListEvents(ctx context.Context, p ListParams) ([]Event, error) {
	if p.Status != "" {
		if _, err := ParseStatus(string(p.Status)); err != nil {
			return nil, err
		}
	}
	if err := checkFilterText(p.EventType, p.AggregateType, p.AggregateID, ""); err != nil {
		return nil, err
	}
	if p.Limit < 0 || p.Limit > ListLimitMax {
		return nil, &ConfigError{Field: "limit", Err: fmt.Errorf("is %d: use 1 to %d, and page with the before ID", p.Limit, ListLimitMax)}
	}
	rows, err := m.drv.ListEvents(ctx, driver.ListParams{
		Status: string(p.Status), EventType: p.EventType, AggregateType: p.AggregateType,
		AggregateID: p.AggregateID, BeforeID: p.BeforeID, Limit: cmp.Or(p.Limit, ListLimitDefault),
	})
	if err != nil {
		return nil, err
	}
	return eventsFromRows(rows), nil
}

// Event returns one event, or an error wrapping ErrNotFound.
func (m *Manager) Event(ctx context.Context, id int64) (Event, error) {
	row, err := m.drv.GetEvent(ctx, id)
	if err != nil {
		return Event{}, err
	}
	return eventFromRow(&row), nil
}

// Retry sends failed (dead-lettered) events back to pending with their
// attempts reset. It returns the IDs it changed; IDs that are missing or not
// failed are left alone.
func (m *Manager) Retry(ctx context.Context, ids ...int64) ([]int64, error) {
	return m.drv.Requeue(ctx, ids, []string{driver.StatusFailed})
}

// Replay sends processed events back to pending so the relay publishes them
// again. It returns the IDs it changed; IDs that are missing or not
// processed are left alone.
func (m *Manager) Replay(ctx context.Context, ids ...int64) ([]int64, error) {
	return m.drv.Requeue(ctx, ids, []string{driver.StatusProcessed})
}

// Progress is told the running total of a long operation after each batch.
type Progress func(done int64)

// RetryAllFailed retries every failed event, in batches of batchSize (0 for
// RequeueBatchSizeDefault) so no statement holds many locks. Events that fail again while it
// runs are not retried twice. It returns how many it retried.
func (m *Manager) RetryAllFailed(ctx context.Context, batchSize int, progress Progress) (int64, error) {
	if batchSize <= 0 {
		batchSize = RequeueBatchSizeDefault
	}
	var total, after int64
	for {
		n, last, err := m.drv.RequeueStatus(ctx, driver.StatusFailed, after, batchSize)
		if err != nil {
			return total, err
		}
		total += n
		after = last
		if progress != nil && n > 0 {
			progress(total)
		}
		if n < int64(batchSize) {
			return total, nil
		}
	}
}

// PurgeParams selects finished events to delete.
type PurgeParams struct {
	// Status is StatusProcessed (the default) or StatusFailed.
	Status Status
	// OlderThan keeps events finished more recently than this, by the
	// database clock. Required.
	OlderThan time.Duration
	// BatchSize is how many rows one DELETE removes. Defaults to
	// PurgeBatchSizeDefault.
	BatchSize int
}

// Purge deletes finished events in batches, each its own short statement,
// until none match; purging processed events also trims
// outbox_events_archive, dropping whole partitions when it is partitioned.
// It returns how many it deleted.
func (m *Manager) Purge(ctx context.Context, p PurgeParams, progress Progress) (int64, error) {
	if p.Status == "" {
		p.Status = StatusProcessed
	}
	if p.Status != StatusProcessed && p.Status != StatusFailed {
		return 0, &ConfigError{Field: "status", Err: fmt.Errorf("%q cannot be purged: use processed or failed", p.Status)}
	}
	if p.OlderThan <= 0 {
		return 0, &ConfigError{Field: "older-than", Err: errors.New("must be a positive duration")}
	}
	if p.BatchSize <= 0 {
		p.BatchSize = PurgeBatchSizeDefault
	}
	total, err := inBatches(0, p.BatchSize, progress, func() (int64, error) {
		return m.drv.PurgeBatch(ctx, driver.PurgeParams{Status: string(p.Status), OlderThan: p.OlderThan, BatchSize: p.BatchSize})
	})
	if err != nil || p.Status != StatusProcessed {
		return total, err
	}
	// Events a relay archived are processed history too.
	return m.purgeArchive(ctx, p, total, progress)
}

// PruneKeys deletes, in batches of batchSize (PurgeBatchSizeDefault when
// not positive), the MySQL/MariaDB key-sequence rows (outbox_keys, migration
// 7) of aggregates that have no pending, processing or failed event, and
// returns how many it deleted. A row a writer holds is passed over until the
// next run; an aggregate written again starts its sequence at 1, which keeps
// its order because none of its earlier events is unfinished. The scheduled
// purge runs it after each purge; `outbox purge` after deleting events. On
// PostgreSQL and SQLite, which keep no such rows, it does nothing.
func (m *Manager) PruneKeys(ctx context.Context, batchSize int, progress Progress) (int64, error) {
	kp, ok := m.drv.(driver.KeyPruner)
	if !ok || !kp.HasKeyRows() {
		return 0, nil
	}
	if batchSize <= 0 {
		batchSize = PurgeBatchSizeDefault
	}
	var (
		total int64
		cur   driver.KeyCursor
	)
	for {
		n, next, more, err := kp.PruneKeysBatch(ctx, cur, batchSize)
		total += n
		if err != nil {
			return total, err
		}
		if progress != nil && n > 0 {
			progress(total)
		}
		if !more {
			return total, nil
		}
		cur = next
	}
}

// inBatches runs batch until it removes fewer than size rows, adding what
// each removes to total and reporting the sum to progress (when not nil)
// after every batch that removed any.
func inBatches(total int64, size int, progress Progress, batch func() (int64, error)) (int64, error) {
	for {
		n, err := batch()
		if err != nil {
			return total, err
		}
		total += n
		if progress != nil && n > 0 {
			progress(total)
		}
		if n < int64(size) {
			return total, nil
		}
	}
}
