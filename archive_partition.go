package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

// archiveMaintenanceInterval is how often a relay with archive retention
// makes sure the partitions ahead of a partitioned archive exist. A pass is
// a few catalog reads when there is nothing to create.
const archiveMaintenanceInterval = 5 * time.Minute

// ArchivePartition is one partition of a partitioned outbox_events_archive
// (see outboxmigrate.Config.PartitionArchive).
type ArchivePartition struct {
	// Name is the partition's table name, in the outbox schema.
	Name string
	// From and To bound processed_at: From ≤ processed_at < To. From is
	// zero for the partition holding the archive from before partitioning.
	From, To time.Time
	// Default is true for the partition that catches rows no other
	// partition takes; From and To are zero.
	Default bool
}

// ArchiveMaintenance reports what MaintainArchive did.
type ArchiveMaintenance struct {
	// Period is "daily" or "weekly"; empty when the archive is not
	// partitioned (and nothing was done).
	Period string
	// Created names the partitions created, oldest first.
	Created []string
	// Moved counts rows moved out of the default partition into a
	// partition created for them.
	Moved int64
}

// errPartitionUnsupported is returned by the partition methods on
// databases other than PostgreSQL.
var errPartitionUnsupported = fmt.Errorf("archive partitioning is PostgreSQL only: %w", errors.ErrUnsupported)

// MaintainArchive creates the partitions of a partitioned archive for the
// current period and the ones after it (a week of daily partitions, four
// weekly ones) where they are missing, moving in any rows the default
// partition caught for them. Relays with RetainArchive run it every few
// minutes, one at a time under an advisory lock; call it from your own
// scheduler when no such relay runs. It does nothing when the archive is
// not partitioned, and returns an error wrapping errors.ErrUnsupported on
// databases other than PostgreSQL.
func (m *Manager) MaintainArchive(ctx context.Context) (ArchiveMaintenance, error) {
	p, ok := m.drv.(driver.ArchivePartitioner)
	if !ok {
		return ArchiveMaintenance{}, errPartitionUnsupported
	}
	res, err := p.MaintainArchive(ctx)
	if err != nil {
		return ArchiveMaintenance{}, fmt.Errorf("maintain archive partitions: %w", err)
	}
	return ArchiveMaintenance{Period: res.Period, Created: res.Created, Moved: res.Moved}, nil
}

// ArchivePartitions returns the period ("daily" or "weekly") and the
// partitions of a partitioned archive, oldest first with the default
// partition last; both are empty when the archive is not partitioned.
func (m *Manager) ArchivePartitions(ctx context.Context) (string, []ArchivePartition, error) {
	p, ok := m.drv.(driver.ArchivePartitioner)
	if !ok {
		return "", nil, errPartitionUnsupported
	}
	period, parts, err := p.ArchivePartitions(ctx)
	if err != nil {
		return "", nil, err
	}
	out := make([]ArchivePartition, len(parts))
	for i, pt := range parts {
		out[i] = ArchivePartition(pt)
	}
	return period, out, nil
}

// purgeArchive trims outbox_events_archive for Purge: a partitioned archive
// first loses its partitions wholly before the cutoff, then the rows left
// before it (in partitions straddling the cutoff, or in a plain archive) go
// in batched deletes. total is what Purge removed before, for progress.
func (m *Manager) purgeArchive(ctx context.Context, p PurgeParams, total int64, progress Progress) (int64, error) {
	if pp, ok := m.drv.(driver.ArchivePartitioner); ok {
		n, _, err := pp.PurgeArchivePartitions(ctx, p.OlderThan, func(done int64) {
			if progress != nil {
				progress(total + done)
			}
		})
		total += n
		if err != nil {
			return total, err
		}
	}
	return inBatches(total, p.BatchSize, progress, func() (int64, error) {
		return m.drv.PurgeArchiveBatch(ctx, p.OlderThan, p.BatchSize)
	})
}

// archiveMaintenanceLoop keeps the partitions ahead of a partitioned
// archive, for a relay with RetainArchive; on a plain archive each pass is
// one catalog read.
func (r *Relay) archiveMaintenanceLoop(ctx context.Context, p driver.ArchivePartitioner) {
	for {
		res, err := p.MaintainArchive(ctx)
		switch {
		case err != nil:
			if ctx.Err() == nil && !r.isStopping() {
				r.log.Warn("archive partition maintenance failed; retrying later",
					slog.String("error", err.Error()), slog.Duration("retry_in", archiveMaintenanceInterval))
			}
		case len(res.Created) > 0:
			r.log.Info("created archive partitions", slog.Any("partitions", res.Created), slog.Int64("moved_rows", res.Moved))
		}
		if !r.sleep(archiveMaintenanceInterval, false) {
			return
		}
	}
}
