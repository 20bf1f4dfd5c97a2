package outbox

import (
	"context"
	"time"
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
// slow retry and finds the next one due. Events are scheduled by the
// leading relay's pass, so with DeadLetterRetry off (or no relay running)
// it reports none. It needs schema version 5 (outbox migrate).
func (m *Manager) DeadLetterRetryStats(ctx context.Context) (DeadLetterRetryStats, error) {
	s, err := m.drv.DeadLetterRetryStats(ctx)
	if err != nil {
		return DeadLetterRetryStats{}, err
	}
	return DeadLetterRetryStats{Waiting: s.Waiting, NextDue: s.NextDue}, nil
}
