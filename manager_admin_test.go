package outbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

func TestFlowMeter(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	sample := func(sec, inserted, pending, processing, failed int64) outbox.Sample {
		return outbox.Sample{At: at.Add(time.Duration(sec) * time.Second), Inserted: inserted,
			Stats: outbox.Stats{Pending: pending, Processing: processing, Failed: failed}}
	}
	var m outbox.FlowMeter
	_, ok := m.Add(sample(0, 100, 10, 0, 1))
	require.False(t, ok, "the first sample has no flow")

	steps := []struct {
		s    outbox.Sample
		want outbox.Flow
	}{
		// 20 written, backlog 10 -> 5, one more failed: 24 published.
		{sample(5, 120, 3, 2, 2), outbox.Flow{Interval: 5 * time.Second, Written: 20, Published: 24}},
		// The counter lags: 10 events are visible but not yet counted, so
		// this interval's -10 is carried ...
		{sample(10, 120, 15, 0, 2), outbox.Flow{Interval: 5 * time.Second, Published: 0}},
		// ... and taken from the next, where the counter caught up.
		{sample(15, 135, 5, 0, 2), outbox.Flow{Interval: 5 * time.Second, Written: 15, Published: 15}},
		// Retrying 2 failed events is no publish.
		{sample(20, 135, 7, 0, 0), outbox.Flow{Interval: 5 * time.Second}},
		// A counter reset gives no flow and forgets the carry.
		{sample(25, 3, 7, 0, 0), outbox.Flow{Interval: 5 * time.Second}},
		{sample(30, 8, 2, 0, 0), outbox.Flow{Interval: 5 * time.Second, Written: 5, Published: 10}},
	}
	for i, st := range steps {
		f, ok := m.Add(st.s)
		require.True(t, ok)
		require.Equal(t, st.want, f, "step %d", i)
	}
}

// The meter's published total matches what a relay delivered, whether it
// keeps the rows or deletes them.
func TestFlowMeterWithRelay(t *testing.T) {
	t.Parallel()
	for _, retention := range []outbox.Retention{outbox.RetainProcessed, outbox.RetainDelete} {
		t.Run(string(retention), func(t *testing.T) {
			t.Parallel()
			b := setupRelay(t)
			var m outbox.FlowMeter
			var written, published int64
			add := func() outbox.Sample {
				s, err := b.mgr.Sample(b.ctx)
				require.NoError(t, err)
				if f, ok := m.Add(s); ok {
					written += f.Written
					published += f.Published
				}
				return s
			}
			add()
			rec := outboxtest.NewRecorder()
			b.start(t, outbox.RelayConfig{Sink: rec, Retention: retention, BatchSize: 7})
			b.write(t, 30, nil)
			b.write(t, 20, nil)
			rec.WaitLen(t, 50, 20*time.Second)
			testutil.WaitFor(t, 20*time.Second, "the meter to see 50 written and published", func() bool {
				s := add()
				return written == 50 && published == 50 && s.Stats.Pending+s.Stats.Processing == 0
			})
		})
	}
}

func TestSearchEventsValidation(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	tests := []struct {
		p    outbox.SearchParams
		want string
	}{
		{outbox.SearchParams{EventFilter: outbox.EventFilter{Status: "done"}}, `invalid status: unknown status "done"`},
		{outbox.SearchParams{Limit: outbox.SearchLimitMax + 1}, "invalid limit: is 1001: use 1 to 1000"},
		{outbox.SearchParams{Limit: -1}, "invalid limit"},
		{outbox.SearchParams{EventFilter: outbox.EventFilter{MinAttempts: -1}}, "invalid min_attempts"},
		{outbox.SearchParams{EventFilter: outbox.EventFilter{CreatedAfter: time.Now(), CreatedBefore: time.Now().Add(-time.Hour)}},
			"invalid created_before: must be later than created_after"},
	}
	for _, tt := range tests {
		_, err := b.mgr.SearchEvents(b.ctx, tt.p)
		var ce *outbox.ConfigError
		require.True(t, errors.As(err, &ce), "%v", err)
		require.ErrorContains(t, err, tt.want)
	}
}

// RetryMatching and ReplayMatching work in batches and report progress;
// CountEvents sizes them.
func TestRequeueMatchingInBatches(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	n := outbox.RequeueBatchSizeDefault + 234
	ids := b.write(t, n, func(i int, m *outbox.Message) {
		if i%2 == 1 {
			m.EventType = "other"
		}
	})
	_, err := b.pool.Exec(b.ctx, `UPDATE `+testutil.Table(b.schema)+` SET status = 'failed', attempts = 3 WHERE id <= $1`, ids[n-3])
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE `+testutil.Table(b.schema)+` SET status = 'processed', processed_at = now() WHERE id > $1`, ids[n-3])
	require.NoError(t, err)

	count, err := b.mgr.CountEvents(b.ctx, outbox.EventFilter{Status: outbox.StatusFailed})
	require.NoError(t, err)
	require.Equal(t, int64(n-2), count)
	all, err := b.mgr.CountEvents(b.ctx, outbox.EventFilter{})
	require.NoError(t, err)
	require.Equal(t, int64(n), all)

	var progress []int64
	retried, err := b.mgr.RetryMatching(b.ctx, outbox.EventFilter{}, func(done int64) { progress = append(progress, done) })
	require.NoError(t, err)
	require.Equal(t, int64(n-2), retried)
	require.Equal(t, []int64{int64(outbox.RequeueBatchSizeDefault), int64(n - 2)}, progress)
	s := b.stats(t)
	require.Equal(t, int64(n-2), s.Pending)
	require.Equal(t, int64(2), s.Processed)

	replayed, err := b.mgr.ReplayMatching(b.ctx, outbox.EventFilter{EventType: "other"}, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), replayed, "of the two processed events one is of type other")

	_, err = b.mgr.RetryMatching(b.ctx, outbox.EventFilter{Status: outbox.StatusPending}, nil)
	require.ErrorContains(t, err, `"pending" events cannot be retried`)
	_, err = b.mgr.ReplayMatching(b.ctx, outbox.EventFilter{Status: outbox.StatusFailed}, nil)
	require.ErrorContains(t, err, `"failed" events cannot be replayed`)
}

func TestDiscardAndMaxAttemptsValidation(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	ids := b.write(t, 1, nil)
	_, err := b.mgr.Discard(b.ctx, "", ids...)
	require.ErrorContains(t, err, "invalid reason: is empty")
	_, err = b.mgr.Discard(b.ctx, string(make([]byte, outbox.ReasonMaxLen+1)), ids...)
	require.ErrorContains(t, err, "at most 2000 bytes")
	_, err = b.mgr.Discard(b.ctx, "bad\x00byte", ids...)
	require.ErrorContains(t, err, "without NUL bytes", "PostgreSQL would refuse it")
	changed, err := b.mgr.Discard(b.ctx, "bad", ids...)
	require.NoError(t, err)
	require.Equal(t, ids, changed)

	_, err = b.mgr.SetMaxAttempts(b.ctx, ids[0], -1)
	require.ErrorContains(t, err, "invalid max_attempts: is -1")
	_, err = b.mgr.SetMaxAttempts(b.ctx, ids[0]+100, 3)
	require.ErrorIs(t, err, outbox.ErrNotFound)
}
