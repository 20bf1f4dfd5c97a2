package driver

import (
	"context"
	"time"
)

// Filter selects events for the operator's searches and bulk actions. Zero
// fields do not filter.
type Filter struct {
	Status         string
	EventType      string
	AggregateType  string
	AggregateID    string
	IdempotencyKey string
	CreatedAfter   time.Time // created_at >= CreatedAfter
	CreatedBefore  time.Time // created_at < CreatedBefore
	MinAttempts    int       // attempts >= MinAttempts
}

// SearchParams filters and pages a search, newest first.
type SearchParams struct {
	Filter
	BeforeID int64 // keyset: only events with a smaller ID; 0 for no bound
	Limit    int
}

// Lease is one relay's hold on processing events.
type Lease struct {
	RelayID string
	Events  int64
	// FirstEnd and LastEnd are the earliest and the latest locked_until of
	// the relay's events; a FirstEnd in the past is a lease that expired
	// and waits for the rescue.
	FirstEnd, LastEnd time.Time
	// Now is the database clock when the leases were read.
	Now time.Time
}

// Sample is a cheap reading of the outbox table for rates over time.
type Sample struct {
	// Stats has exact pending, processing and failed counts and the lag;
	// Processed is the planner's estimate.
	Stats Stats
	// Inserted is the database's running count of rows inserted into the
	// table: pg_stat_user_tables.n_tup_ins on PostgreSQL, the auto-increment
	// counter on SQLite and MySQL.
	Inserted int64
}

// Admin is what the admin API and the operator's bulk commands need beyond
// the relay's statements.
type Admin interface {
	// SearchEvents lists events matching p, newest first.
	SearchEvents(ctx context.Context, p SearchParams) ([]Event, error)
	// CountEvents counts events matching f.
	CountEvents(ctx context.Context, f Filter) (int64, error)
	// RequeueMatching requeues up to limit events matching f (whose Status
	// is failed or processed) with an ID above afterID, in ID order, as
	// Requeue does; it returns how many it changed and the highest ID it
	// changed, for the next call.
	RequeueMatching(ctx context.Context, f Filter, afterID int64, limit int) (n int64, lastID int64, err error)
	// Discard moves the given pending events to failed with reason as
	// their last error, and marks failed ones discarded the same way (so
	// that they no longer hold back an ordered aggregate); it returns the
	// IDs it changed.
	Discard(ctx context.Context, ids []int64, reason string) ([]int64, error)
	// SetMaxAttempts sets one event's max_attempts (0 for the relay's
	// default) and returns the event, or ErrNotFound.
	SetMaxAttempts(ctx context.Context, id int64, maxAttempts int) (Event, error)
	// Leases lists the relays holding processing events.
	Leases(ctx context.Context) ([]Lease, error)
	// Sample reads the counts and the insert counter.
	Sample(ctx context.Context) (Sample, error)
	// TableHealth reads the tables' storage and the vacuum horizon from
	// the catalog and statistics, without scanning a table (health.go).
	TableHealth(ctx context.Context) (TableHealth, error)
	// Replayer reads delivered events for a replay to a sink.
	Replayer
}

// preSizeMax bounds the capacity a result slice is made with before its
// rows are read: a caller's limit says how many rows may come, not how
// many will, and a huge limit must not allocate memory up front.
const preSizeMax = 1024

// PreSize returns the capacity to make a result slice with for a query
// limited to limit rows; the slice grows past it as rows arrive.
func PreSize(limit int) int { return min(max(limit, 0), preSizeMax) }

// ReplayParams selects one keyset batch of delivered events to publish
// again without changing them: processed rows of outbox_events and every
// row of outbox_events_archive, merged in ID order.
type ReplayParams struct {
	// Filter narrows the events; its Status and MinAttempts are ignored
	// (only delivered events are read).
	Filter
	AfterID int64 // keyset: only events with a greater ID
	UpToID  int64 // only events with an ID at most this; required for ReplayBatch, 0 for no bound in CountReplay
	Limit   int   // ReplayBatch only
}

// ReplayWindow is how many IDs past AfterID one ReplayBatch reads at most:
// a bound on each statement's work, so that a filter that matches few rows
// never turns one batch into a scan of the whole history (nor a plan that
// sorts it). Whatever the filter, a replay reads each row once.
func ReplayWindow(limit int) int64 { return int64(max(limit*20, 10000)) }

// Replayer reads delivered events for a replay to a sink (Manager.ReplayTo).
type Replayer interface {
	// ReplayBatch returns up to p.Limit delivered events matching p with
	// an ID in (p.AfterID, min(p.AfterID+ReplayWindow(p.Limit), p.UpToID)],
	// in ID order, from the table and the archive read in one statement,
	// so an event a relay archives between two batches is read once. next
	// is the AfterID of the following batch: the last event's ID when the
	// batch is full, else the window's end; the replay is done once next
	// reaches p.UpToID.
	ReplayBatch(ctx context.Context, p ReplayParams) (events []Event, next int64, err error)
	// CountReplay counts the delivered events matching p.
	CountReplay(ctx context.Context, p ReplayParams) (int64, error)
	// MaxEventID returns the highest event ID in the table and the
	// archive, 0 when both are empty.
	MaxEventID(ctx context.Context) (int64, error)
}

// ReplayBounds is the ID range (after, upTo] of the ReplayBatch for p, and
// the limit, for drivers to share one rule.
func ReplayBounds(p ReplayParams) (after, upTo int64, limit int) {
	limit = max(p.Limit, 1)
	upTo = p.UpToID
	if w := p.AfterID + ReplayWindow(limit); upTo <= 0 || w < upTo {
		upTo = w
	}
	return p.AfterID, upTo, limit
}

// ReplayNext is the AfterID after a batch of n events (last the highest)
// read within (after, upTo] with limit.
func ReplayNext(n int, last, upTo int64, limit int) int64 {
	if n >= limit {
		return last
	}
	return upTo
}
