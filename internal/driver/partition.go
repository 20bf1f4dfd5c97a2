package driver

import (
	"context"
	"errors"
	"time"
)

// Archive partition periods: the span of one partition of
// outbox_events_archive, by processed_at in UTC.
const (
	PeriodDaily  = "daily"  // one partition per UTC day
	PeriodWeekly = "weekly" // one partition per ISO week, from Monday 00:00 UTC
)

// ErrPeriodChange is returned when the archive is already partitioned with
// another period: switching is not supported.
var ErrPeriodChange = errors.New("the partition period cannot be changed")

// ArchivePartition is one partition of a partitioned archive. From is zero
// for the partition that holds everything before the first period (the
// archive as it was before partitioning); Default marks the partition that
// catches rows no other partition takes.
type ArchivePartition struct {
	Name     string
	From, To time.Time
	Default  bool
}

// PartitionResult reports what partitioning or maintenance did.
type PartitionResult struct {
	// Period is the archive's partition period; empty when the archive is
	// not partitioned.
	Period string
	// Converted is true when this call turned the plain archive into a
	// partitioned one.
	Converted bool
	// Created names the partitions this call created, oldest first.
	Created []string
	// Moved counts rows moved from the default partition into a partition
	// created for them.
	Moved int64
}

// ArchivePartitioner is implemented by drivers that can range-partition
// outbox_events_archive by processed_at (PostgreSQL), so that retention
// drops whole partitions instead of deleting rows.
type ArchivePartitioner interface {
	// MigratePartitioned applies the missing migrations, then turns the
	// archive into a partitioned one with the given period (keeping its
	// rows) and creates the partitions ahead, all under the migration lock.
	// A second call with the same period changes nothing but missing
	// partitions; another period fails with ErrPeriodChange.
	MigratePartitioned(ctx context.Context, period string) ([]Migration, PartitionResult, error)
	// PartitionSQL returns the script that MigratePartitioned runs after
	// the migrations.
	PartitionSQL(period string) string
	// MaintainArchive creates the partitions for the current period and the
	// next ones when missing (moving rows the default partition caught for
	// them), under a transaction-level advisory lock so concurrent callers
	// serialize. It does nothing when the archive is not partitioned.
	MaintainArchive(ctx context.Context) (PartitionResult, error)
	// ArchivePartitions lists the archive's partitions, oldest first, and
	// the period; both are empty when the archive is not partitioned.
	ArchivePartitions(ctx context.Context) (string, []ArchivePartition, error)
	// PurgeArchivePartitions drops each partition of a partitioned archive
	// that lies wholly before now minus olderThan (by the database clock),
	// leaving the old rows of the partition that straddles the cutoff (and
	// of the default partition) to PurgeArchiveBatch. It reports the
	// running count of removed rows to progress (may be nil) and returns
	// the total; ok is false (and nothing is done) when the archive is not
	// partitioned.
	PurgeArchivePartitions(ctx context.Context, olderThan time.Duration, progress func(int64)) (n int64, ok bool, err error)
}
