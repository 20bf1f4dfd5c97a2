package outboxadmin_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxadmin"
)

func TestStatsDeadLetterRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *outboxadmin.Config) { c.SampleInterval = 100 * time.Millisecond })
	ids := b.seed(t)
	due := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	b.exec(t, `UPDATE {table} SET dead_letter_retry_at = $2 WHERE id = ANY($1)`, []int64{ids[4], ids[5]}, due)

	var st outboxadmin.StatsJSON
	testutil.WaitFor(t, 20*time.Second, "a sample with the scheduled retries", func() bool {
		b.getJSON(t, "/api/stats", &st)
		return st.DeadLetterRetryWaiting == 2
	})
	require.NotNil(t, st.DeadLetterRetryNextDue)
	require.True(t, due.Equal(*st.DeadLetterRetryNextDue), "%v", st.DeadLetterRetryNextDue)
}
