package driver

import (
	"context"
	"time"
)

// PartitionedVersion is the migration that adds ordered delivery by owned
// partitions (PostgreSQL: outbox_partitions, outbox_partition_relays and
// the partition indexes; docs/ordering.md).
const PartitionedVersion = 8

// InFlightVersion is the migration that records, on each partition, the
// events an ordered relay has in flight from it (PostgreSQL:
// outbox_partition_in_flight), so that a takeover after a lease expiry
// counts it as an attempt of those events, as a row-lease rescue does.
const InFlightVersion = 10

// Partitions is the number of partitions the keys hash to, fixed by the
// migration.
const Partitions = 256

// PartitionClaimParams selects a batch from the partitions a relay owns.
type PartitionClaimParams struct {
	RelayID   string
	BatchSize int
	// PerPartition is the most events the read takes from one partition;
	// 0 (or more than BatchSize) for BatchSize. A small limit spreads a
	// batch over more partitions, whose oldest events lie close together
	// in the table; Claim.Capped reports the partitions that reached it.
	PerPartition int
	// MinLease: only partitions with more than this much of their lease
	// left are read.
	MinLease time.Duration
	// Busy are partitions with a batch of this relay in flight: not read.
	Busy []int32
	// Offset rotates the order the partitions are read in.
	Offset int
	// Skip is OrderedClaimParams.Skip.
	Skip bool
	// Unordered reads for a relay that keeps no order: every due pending
	// event of the partitions, oldest first, with no horizon (an event
	// committed while an older transaction still runs is read at once) and
	// no event held back by an earlier one of its key (retrying,
	// dead-lettered or in flight). Skip does not apply.
	Unordered bool
	// MaxBytes is OrderedClaimParams.MaxBytes.
	MaxBytes int64
	// RecordInFlight records the batch's events on their partitions before
	// the read returns (schema at InFlightVersion or later).
	RecordInFlight bool
}

// BalanceParams is one balance round of a relay's partitions.
type BalanceParams struct {
	RelayID string
	Lease   time.Duration
	// Busy are partitions with a batch in flight: never released.
	Busy []int32
	// Stuck are partitions whose batch in flight is past its publish
	// deadline: not renewed, so that another relay takes them once their
	// lease ends.
	Stuck []int32
	// RescueInFlight: when the round takes over partitions whose owner's
	// lease ran out, the events recorded in flight on them that are still
	// pending are rescued as RescueExpired rescues an expired row lease
	// (schema at InFlightVersion or later).
	RescueInFlight bool
	// MaxAttempts is RescueParams.MaxAttempts.
	MaxAttempts int
	// Restart marks a relay process's first round (with RescueInFlight):
	// the partitions it finds still its own with a record in flight were
	// held by an earlier process of the same relay ID that died, and are
	// taken over and rescued as orphans are.
	Restart bool
}

// BalanceResult reports a balance round.
type BalanceResult struct {
	// Held is how many partitions the relay holds after the round, Relays
	// how many relays share them.
	Held, Relays int
	// Rescue is what the takeovers rescued (BalanceParams.RescueInFlight).
	Rescue RescueResult
}

// PartitionClaimer is implemented by drivers that deliver in order by owned
// partitions of keys (docs/ordering.md). Its reads write no event (only,
// with RecordInFlight, the batch's in-flight record); marks whose Fence
// carries Parts are fenced on those partitions' leases, and a release of
// such events writes no event.
type PartitionClaimer interface {
	// ReadPartitions returns up to BatchSize due pending events of the
	// partitions the relay owns, at most PerPartition of each, such that for every key it returns events
	// of, every earlier event of the key is finished or in the batch
	// before them. The events come back in (txid, id) order, cut before
	// the first suspect (an event with a lease expiry on record), or that
	// suspect alone when it comes first, and within MaxBytes (Claim.Cut
	// says it cut). A read with no event says whether committed events were left out for the horizon
	// (Claim.Held).
	ReadPartitions(ctx context.Context, p PartitionClaimParams) (Claim, error)
	// BalancePartitions renews, releases and acquires the relay's
	// partitions, rescues what was in flight on the partitions it took
	// from a relay whose lease ran out, and returns how many it holds and
	// how many relays share them.
	BalancePartitions(ctx context.Context, p BalanceParams) (BalanceResult, error)
	// ReleasePartitions gives up every partition of the relay and removes
	// it from the share-out.
	ReleasePartitions(ctx context.Context, relayID string) error
}
