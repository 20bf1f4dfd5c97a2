package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/errtext"
)

// SearchLimitMax bounds SearchParams.Limit.
const SearchLimitMax = 1000

// ReasonMaxLen bounds the reason Discard stores as an event's last error,
// in bytes, as the relay bounds the errors it stores.
const ReasonMaxLen = errtext.MaxLen

// EventFilter selects events by their fields for searches and bulk actions.
// Zero fields do not filter.
type EventFilter struct {
	Status         Status
	EventType      string
	AggregateType  string
	AggregateID    string
	IdempotencyKey string
	// CreatedAfter keeps events created at or after it.
	CreatedAfter time.Time
	// CreatedBefore keeps events created before it.
	CreatedBefore time.Time
	// MinAttempts keeps events with at least this many failed publishes;
	// with StatusPending it selects the events being retried.
	MinAttempts int
}

func (f EventFilter) validate() error {
	if f.Status != "" {
		if _, err := ParseStatus(string(f.Status)); err != nil {
			return err
		}
	}
	if err := checkFilterText(f.EventType, f.AggregateType, f.AggregateID, f.IdempotencyKey); err != nil {
		return err
	}
	if f.MinAttempts < 0 {
		return &ConfigError{Field: "min_attempts", Err: fmt.Errorf("is %d: use 0 or more", f.MinAttempts)}
	}
	if !f.CreatedAfter.IsZero() && !f.CreatedBefore.IsZero() && !f.CreatedAfter.Before(f.CreatedBefore) {
		return &ConfigError{Field: "created_before", Err: errors.New("must be later than created_after")}
	}
	return nil
}

func (f EventFilter) driver() driver.Filter {
	return driver.Filter{
		Status: string(f.Status), EventType: f.EventType, AggregateType: f.AggregateType, AggregateID: f.AggregateID,
		IdempotencyKey: f.IdempotencyKey, CreatedAfter: f.CreatedAfter, CreatedBefore: f.CreatedBefore,
		MinAttempts: f.MinAttempts,
	}
}

// SearchParams filters and pages a search.
type SearchParams struct {
	EventFilter
	// BeforeID pages backwards: only events with a smaller ID. Pass the
	// last ID of the previous page.
	BeforeID int64
	// Limit is the page size. Defaults to ListLimitDefault; at most
	// SearchLimitMax.
	Limit int
}

// SearchEvents returns the events matching p, newest first. Pages are keyset
// pages on the event ID, so a deep page costs no more than the first.
func (m *Manager) SearchEvents(ctx context.Context, p SearchParams) ([]Event, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	if p.Limit < 0 || p.Limit > SearchLimitMax {
		return nil, &ConfigError{Field: "limit", Err: fmt.Errorf("is %d: use 1 to %d", p.Limit, SearchLimitMax)}
	}
	rows, err := m.drv.SearchEvents(ctx, driver.SearchParams{
		Filter: p.driver(), BeforeID: p.BeforeID, Limit: cmp.Or(p.Limit, ListLimitDefault),
	})
	if err != nil {
		return nil, err
	}
	return eventsFromRows(rows), nil
}

// CountEvents counts the events matching f. Without a status other than
// processed it reads the table's whole history: it is meant for sizing a bulk
// action, not for dashboards.
func (m *Manager) CountEvents(ctx context.Context, f EventFilter) (int64, error) {
	if err := f.validate(); err != nil {
		return 0, err
	}
	return m.drv.CountEvents(ctx, f.driver())
}

// RetryMatching retries every failed event that f selects, in batches of
// RequeueBatchSizeDefault, and returns how many it retried. f.Status must be
// empty or StatusFailed.
func (m *Manager) RetryMatching(ctx context.Context, f EventFilter, progress Progress) (int64, error) {
	if f.Status != "" && f.Status != StatusFailed {
		return 0, &ConfigError{Field: "status", Err: fmt.Errorf("%q events cannot be retried: retry takes failed events", f.Status)}
	}
	f.Status = StatusFailed
	return m.requeueMatching(ctx, f, progress)
}

// ReplayMatching replays every processed event that f selects, in batches of
// RequeueBatchSizeDefault, and returns how many it replayed. f.Status must be
// empty or StatusProcessed. Events a relay deleted or archived (see
// Retention) are not in the table and cannot be replayed.
func (m *Manager) ReplayMatching(ctx context.Context, f EventFilter, progress Progress) (int64, error) {
	if f.Status != "" && f.Status != StatusProcessed {
		return 0, &ConfigError{Field: "status", Err: fmt.Errorf("%q events cannot be replayed: replay takes processed events", f.Status)}
	}
	f.Status = StatusProcessed
	return m.requeueMatching(ctx, f, progress)
}

func (m *Manager) requeueMatching(ctx context.Context, f EventFilter, progress Progress) (int64, error) {
	if err := f.validate(); err != nil {
		return 0, err
	}
	var total, after int64
	for {
		n, last, err := m.drv.RequeueMatching(ctx, f.driver(), after, RequeueBatchSizeDefault)
		if err != nil {
			return total, err
		}
		total += n
		after = last
		if progress != nil && n > 0 {
			progress(total)
		}
		if n < RequeueBatchSizeDefault {
			return total, nil
		}
	}
}

// Discard dead-letters pending events: they move to failed with reason as
// their last error, and the relay no longer publishes them (Retry sends them
// back). A failed event not yet discarded is marked discarded the same way:
// the slow dead-letter retry passes it over, and in ordered mode it no
// longer holds back its aggregate's later events. It returns the IDs it
// changed; events that are missing, processed, processing (a relay is
// publishing them) or already discarded are left alone.
func (m *Manager) Discard(ctx context.Context, reason string, ids ...int64) ([]int64, error) {
	if reason == "" {
		return nil, &ConfigError{Field: "reason", Err: errors.New("is empty: say why the events are discarded")}
	}
	if errtext.Sanitize(reason, ReasonMaxLen) != reason {
		return nil, &ConfigError{Field: "reason", Err: fmt.Errorf("use valid UTF-8 without NUL bytes, of at most %d bytes", ReasonMaxLen)}
	}
	return m.drv.Discard(ctx, ids, reason)
}

// SetMaxAttempts changes how many failed publishes dead-letter one event;
// 0 restores the relay's default. The relay applies it at the event's next
// failure. It returns the changed event, or an error wrapping ErrNotFound.
func (m *Manager) SetMaxAttempts(ctx context.Context, id int64, maxAttempts int) (Event, error) {
	if maxAttempts < 0 || maxAttempts > MaxAttemptsLimit {
		return Event{}, &ConfigError{Field: "max_attempts", Err: fmt.Errorf("is %d: use 1 to %d, or 0 for the relay's default", maxAttempts, MaxAttemptsLimit)}
	}
	row, err := m.drv.SetMaxAttempts(ctx, id, maxAttempts)
	if err != nil {
		return Event{}, err
	}
	return eventFromRow(&row), nil
}

// Lease is one relay's hold on the events it is publishing.
type Lease struct {
	// RelayID is the relay's ID as stored in locked_by.
	RelayID string
	// Events counts the relay's processing events.
	Events int64
	// FirstEnd and LastEnd are the earliest and latest ends of its leases.
	FirstEnd, LastEnd time.Time
	// Expired is true when FirstEnd has passed by the database clock: the
	// relay stopped without releasing the events, and the next lease rescue
	// returns them to pending.
	Expired bool
}

// Leases lists the relays that hold processing events, by relay ID. A relay
// that is idle between batches holds none and is not listed.
func (m *Manager) Leases(ctx context.Context) ([]Lease, error) {
	rows, err := m.drv.Leases(ctx)
	if err != nil {
		return nil, err
	}
	leases := make([]Lease, len(rows))
	for i, l := range rows {
		leases[i] = Lease{RelayID: l.RelayID, Events: l.Events, FirstEnd: l.FirstEnd, LastEnd: l.LastEnd,
			Expired: l.FirstEnd.Before(l.Now)}
	}
	return leases, nil
}

// Sample is a cheap reading of the outbox table, taken again and again to
// chart it: no statement behind it reads processed rows. Feed successive
// samples to a FlowMeter for rates; the admin dashboard and outbox stats
// --watch do, and so may a service's own status page.
type Sample struct {
	// At is when the sample was taken, by the local clock.
	At time.Time
	// Stats has exact Pending, Processing and Failed counts and the lag;
	// Processed is an estimate, as in EstimateStats.
	Stats Stats
	// Inserted is the database's running count of rows inserted into the
	// outbox table: n_tup_ins of pg_stat_user_tables on PostgreSQL, the
	// table's auto-increment counter (the highest ID ever given) on SQLite
	// and MySQL. Only differences between samples mean anything.
	Inserted int64
}

// Sample reads the table's counts and insert counter.
func (m *Manager) Sample(ctx context.Context) (Sample, error) {
	s, err := m.drv.Sample(ctx)
	if err != nil {
		return Sample{}, err
	}
	out := Sample{At: time.Now(), Inserted: s.Inserted}
	out.Stats, err = m.withDeadLetterRetry(ctx, s.Stats)
	return out, err
}

// Flow is what happened to the outbox between two samples.
type Flow struct {
	// Interval is the time between the samples.
	Interval time.Duration
	// Written counts the events inserted.
	Written int64
	// Published counts the events that left pending and processing for
	// good: delivered, whatever the relay's Retention does with them next.
	Published int64
}

// FlowMeter turns successive samples into flows. Published is derived from
// counts that are exact: every event written either still waits, or failed,
// or was delivered, so Published = Written − Δ(pending+processing) −
// Δfailed, whichever Retention the relays use. Written comes from
// Sample.Inserted. PostgreSQL's counter includes rolled-back inserts and
// reaches the statistics up to about a second after the commit; MySQL's
// auto-increment counter also counts rolled-back inserts, and MySQL 8 (not
// MariaDB) serves it from a cache that information_schema_stats_expiry keeps
// for up to a day by default (set it to 0 for live rates). Where the
// counter's lag makes an interval's Published negative, the meter reports
// zero and takes the difference from the next intervals, so the flows of a
// series add up to the true total once the counter catches up. Retries and
// discards do not change Published; a replayed event's second delivery is
// not counted, and purging failed events counts them as published. A counter
// reset (pg_stat_reset) gives an interval with no flow.
//
// FlowMeter is the one implementation of these rates: the admin dashboard's
// throughput chart and outbox stats --watch use it, and a service showing
// its own rates should too rather than derive Published again.
//
// The zero FlowMeter is ready to use; it is not safe for concurrent use.
type FlowMeter struct {
	prev    Sample
	deficit int64
}

// Add records s and returns the flow since the previous sample; ok is false
// for the first sample, which has no flow.
func (m *FlowMeter) Add(s Sample) (f Flow, ok bool) {
	prev := m.prev
	m.prev = s
	if prev.At.IsZero() {
		return Flow{}, false
	}
	f.Interval = s.At.Sub(prev.At)
	written := s.Inserted - prev.Inserted
	if written < 0 {
		m.deficit = 0
		return f, true
	}
	f.Written = written
	active := (s.Stats.Pending + s.Stats.Processing) - (prev.Stats.Pending + prev.Stats.Processing)
	failed := s.Stats.Failed - prev.Stats.Failed
	published := written - active - failed + m.deficit
	f.Published = max(published, 0)
	m.deficit = min(published, 0)
	return f, true
}
