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
}

// preSizeMax bounds the capacity a result slice is made with before its
// rows are read: a caller's limit says how many rows may come, not how
// many will, and a huge limit must not allocate memory up front.
const preSizeMax = 1024

// PreSize returns the capacity to make a result slice with for a query
// limited to limit rows; the slice grows past it as rows arrive.
func PreSize(limit int) int { return min(max(limit, 0), preSizeMax) }
