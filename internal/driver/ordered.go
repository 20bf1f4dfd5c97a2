package driver

import (
	"context"
	"errors"
	"time"
)

// OrderedVersion is the migration that adds what OrderedClaimer needs: the
// key-order index (and on PostgreSQL the txid column).
const OrderedVersion = 7

// ErrOrderingUnsupported is returned by what needs per-aggregate ordering on
// a database that does not support it yet (MySQL/MariaDB).
var ErrOrderingUnsupported = errors.New("per-aggregate ordering is supported on PostgreSQL and SQLite only for now")

// OrderedClaimParams selects and leases a batch that keeps per-aggregate
// order.
type OrderedClaimParams struct {
	RelayID   string
	BatchSize int
	Lease     time.Duration
	// Skip makes a dead-lettered event stop holding back the later events
	// of its aggregate (RelayConfig.OrderedFailure = skip); by default it
	// holds them until it is retried, discarded while pending, or deleted.
	Skip bool
}

// OrderedClaimer is implemented by drivers that can claim by aggregate
// order (PostgreSQL, SQLite; the database/sql driver implements it for
// MySQL too, where OrderingSupported refuses).
type OrderedClaimer interface {
	// OrderingSupported returns nil when the database can keep the order,
	// and ErrOrderingUnsupported otherwise; the other methods return that
	// error too then.
	OrderingSupported() error
	// ClaimOrdered leases up to BatchSize due pending events such that,
	// for every aggregate (aggregate_type, aggregate_id) it returns events
	// of, no event of that aggregate that comes before them is unfinished
	// outside the claim: not processing, not pending (due or in backoff),
	// not failed (unless Skip). The events come back in publish order: each
	// aggregate's events in their order. Events without an aggregate ID are
	// not ordered.
	ClaimOrdered(ctx context.Context, p OrderedClaimParams) (Claim, error)
	// BlockedAggregates lists up to limit aggregates whose first unfinished
	// event is failed or waiting for a retry while later events wait, and
	// returns how many there are in all.
	BlockedAggregates(ctx context.Context, skip bool, limit int) ([]BlockedAggregate, int64, error)
}

// BlockedAggregate is one aggregate held back by its first unfinished event.
type BlockedAggregate struct {
	AggregateType string
	AggregateID   string
	HeadID        int64  // the event holding the others back
	HeadStatus    string // failed, or pending while it waits for a retry
	Waiting       int64  // later events of the aggregate that wait
}
