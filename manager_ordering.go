package outbox

import (
	"context"

	"github.com/outboxkit/outbox/internal/driver"
)

// ErrOrderingUnsupported is returned by what needs per-aggregate ordering on
// a database driver that cannot keep it. PostgreSQL, SQLite and
// MySQL/MariaDB all can (schema migration 7).
var ErrOrderingUnsupported = driver.ErrOrderingUnsupported

// BlockedAggregate is an aggregate whose later events wait, in ordered
// mode, behind its first unfinished event, which failed: dead-lettered,
// or pending until its next retry.
type BlockedAggregate struct {
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	// HeadID is the event holding the others back; retry it (outbox events
	// retry) once its cause is fixed, or discard it (outbox events discard)
	// to let the aggregate go on without it.
	HeadID int64 `json:"head_id"`
	// HeadStatus is failed (dead-lettered) or pending (waiting for a retry).
	HeadStatus string `json:"head_status"`
	// Waiting counts the later events of the aggregate that wait.
	Waiting int64 `json:"waiting"`
}

// BlockedAggregates is what Manager.BlockedAggregates found.
type BlockedAggregates struct {
	// Total counts every blocked aggregate.
	Total int64 `json:"total"`
	// Aggregates lists the first of them by head event ID, up to the limit.
	Aggregates []BlockedAggregate `json:"aggregates"`
}

// BlockedAggregates finds the aggregates that an ordered relay with failure
// policy p holds back: their first unfinished event failed (dead-lettered,
// or waiting for a retry) while later events wait. It lists up to limit of
// them. On a database without ordering it returns ErrOrderingUnsupported.
func (m *Manager) BlockedAggregates(ctx context.Context, p OrderedFailure, limit int) (BlockedAggregates, error) {
	oc, ok := m.drv.(driver.OrderedClaimer)
	if !ok || oc.OrderingSupported() != nil {
		return BlockedAggregates{}, ErrOrderingUnsupported
	}
	if _, err := ParseOrderedFailure(string(p)); err != nil {
		return BlockedAggregates{}, err
	}
	list, total, err := oc.BlockedAggregates(ctx, p == OrderedFailureSkip, limit)
	if err != nil {
		return BlockedAggregates{}, err
	}
	out := BlockedAggregates{Total: total, Aggregates: make([]BlockedAggregate, len(list))}
	for i, b := range list {
		out.Aggregates[i] = BlockedAggregate(b)
	}
	return out, nil
}
