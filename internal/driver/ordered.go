package driver

import (
	"context"
	"errors"
	"time"
)

// OrderedVersion is the migration that adds what OrderedClaimer needs: the
// key-order index (and on PostgreSQL the txid column, on MySQL/MariaDB the
// key_seq column, its trigger and outbox_keys).
const OrderedVersion = 7

// ErrOrderingUnsupported is returned by what needs per-aggregate ordering on
// a driver that cannot keep it (the three built-in databases all can).
var ErrOrderingUnsupported = errors.New("per-aggregate ordering is not supported by this database driver")

// ErrOrderingNotPrepared is returned when the schema lacks what ordered
// delivery needs beyond the numbered migrations: on MySQL/MariaDB, the
// trigger that numbers each aggregate's events, which only `outbox migrate
// --ordering aggregate` (outboxmigrate.Config.Ordering) creates.
var ErrOrderingNotPrepared = errors.New("the schema is not prepared for per-aggregate ordering: the key sequence trigger outbox_events_key_seq is missing; run outbox migrate --ordering aggregate")

// OrderingPreparer is implemented by drivers whose schema needs a step of
// its own, outside the numbered migrations, before ordered delivery: on
// MySQL/MariaDB the key-sequence trigger, which every writer pays for.
type OrderingPreparer interface {
	// PrepareOrdering takes that step; it does nothing when it was taken.
	PrepareOrdering(ctx context.Context) error
	// PrepareOrderingSQL returns that step as a script, "" when there is
	// none.
	PrepareOrderingSQL() string
	// OrderingPrepared returns nil when the step was taken (or none is
	// needed) and an error wrapping ErrOrderingNotPrepared when not.
	OrderingPrepared(ctx context.Context) error
}

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
	// MaxBytes, when positive, bounds the payload and header bytes of the
	// batch as ClaimParams.MaxBytes does (the first event is always
	// taken); the batch is cut as a prefix of its publish order, so each
	// key keeps a prefix of its run.
	MaxBytes int64
}

// OrderedClaimer is implemented by drivers that can claim by aggregate
// order (PostgreSQL, SQLite, MySQL/MariaDB).
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
	// not ordered. A claim with no event says, where the database can
	// hold committed events back for an older transaction (PostgreSQL),
	// whether it did (Claim.Held).
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

// KeyCursor is a position in the walk of a driver's per-aggregate key rows,
// in their primary key order; the zero value starts at the beginning.
type KeyCursor struct {
	AggregateType, AggregateID string
}

// KeyPruner is implemented by drivers that keep a row per aggregate beside
// the events (MySQL/MariaDB's outbox_keys, the last key_seq given out).
// Without pruning that table grows by one row per aggregate ever written.
type KeyPruner interface {
	// HasKeyRows reports whether this database keeps key rows at all
	// (false on SQLite, whose IDs follow commit order).
	HasKeyRows() bool
	// PruneKeysBatch looks at up to limit key rows after after, skipping
	// rows a writer holds, and deletes those whose aggregate has no
	// unfinished event (pending, processing, failed), in one short
	// transaction. It returns how many it deleted and where the next batch
	// starts; more is false once the walk has reached the end. A driver
	// with no key rows returns more false at once.
	PruneKeysBatch(ctx context.Context, after KeyCursor, limit int) (deleted int64, next KeyCursor, more bool, err error)
}
