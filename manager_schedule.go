package outbox

import (
	"context"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

// DeadLetterRetryStats describes the dead-lettered events waiting for a
// slow retry (RelayConfig.DeadLetterRetry).
type DeadLetterRetryStats struct {
	// Waiting counts failed events with a slow retry scheduled.
	Waiting int64 `json:"waiting"`
	// NextDue is when the next one goes back to pending, by the database
	// clock; zero when none is scheduled.
	NextDue time.Time `json:"next_due,omitzero"`
}

// DeadLetterRetryStats counts the dead-lettered events scheduled for a
// slow retry and finds the next one due; Stats, EstimateStats and Sample
// include it. Events are scheduled by the leading relay's pass, so with
// DeadLetterRetry off (or no relay running) it reports none. On a schema
// migrated before the slow retry existed (version 4 or lower), where no
// retry can be scheduled, it reports none rather than fail, so that stats
// keep working between deploying a new build and running outbox migrate.
func (m *Manager) DeadLetterRetryStats(ctx context.Context) (DeadLetterRetryStats, error) {
	s, err := m.drv.DeadLetterRetryStats(ctx)
	if err != nil {
		if v, verr := m.drv.SchemaVersion(ctx); verr == nil && v > 0 && v < driver.SchedulerVersion {
			return DeadLetterRetryStats{}, nil
		}
		return DeadLetterRetryStats{}, err
	}
	return DeadLetterRetryStats{Waiting: s.Waiting, NextDue: s.NextDue}, nil
}
