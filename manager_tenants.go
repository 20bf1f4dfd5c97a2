package outbox

import (
	"context"
	"fmt"

	"github.com/outboxkit/outbox/internal/driver"
)

// TenantStats are the counts of one tenant schema's outbox, as
// Manager.TenantStats returns them.
type TenantStats struct {
	// Schema is the tenant.
	Schema string
	Stats
}

// TenantStats counts the outboxes of schemas, tenant schemas of the
// Manager's database (docs/tenants.md), as Stats counts one schema; the
// Manager's own schema plays no part. The result is in the order of
// schemas. On PostgreSQL, MySQL and MariaDB it costs one statement per 50 tenants,
// not one per tenant; elsewhere, and where the shared statement fails (a
// tenant migrated before the slow retry existed, a tenant whose table is
// gone), it counts one tenant at a time, and an error names the tenant.
func (m *Manager) TenantStats(ctx context.Context, schemas []string) ([]TenantStats, error) {
	if c, ok := m.drv.(driver.TenantCounter); ok && len(schemas) > 0 {
		counts, err := c.CountSchemas(ctx, schemas)
		if err == nil {
			out := make([]TenantStats, len(counts))
			for i, s := range counts {
				out[i] = TenantStats{Schema: s.Schema, Stats: Stats{
					Pending: s.Pending, Processing: s.Processing, Processed: s.Processed, Failed: s.Failed,
					OldestPendingAge: s.OldestPendingAge,
					DeadLetterRetry:  DeadLetterRetryStats{Waiting: s.DeadLetterRetry.Waiting, NextDue: s.DeadLetterRetry.NextDue},
				}}
			}
			return out, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		// One tenant at a time below: each error names its tenant, and a
		// tenant of an older schema version counts as Stats counts it.
	}
	out := make([]TenantStats, 0, len(schemas))
	for _, s := range schemas {
		st, err := NewManager(m.db, ManagerConfig{Schema: s}).Stats(ctx)
		if err != nil {
			return nil, fmt.Errorf("tenant %q: %w", s, err)
		}
		out = append(out, TenantStats{Schema: s, Stats: st})
	}
	return out, nil
}
