package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/outboxtest"
)

// testReplay: a replay reads the processed rows and the archive merged in
// ID order, in keyset batches that read each row once, leaves out pending
// and failed events, and changes nothing.
func testReplay(t *testing.T, h Harness) {
	b := setup(t, h)
	ids := b.insert(t, 12)
	// 0-3 archived, 4-7 processed, 8-9 archived, 10 pending, 11 failed.
	mark := func(sel []int64, mode driver.Retention) {
		t.Helper()
		c := b.claim(t, "r", len(sel), time.Minute)
		require.Equal(t, sel, claimIDs(c))
		n, err := b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}, sel, mode)
		require.NoError(t, err)
		require.EqualValues(t, len(sel), n)
	}
	mark(ids[:4], driver.RetainArchive)
	mark(ids[4:8], driver.RetainProcessed)
	mark(ids[8:10], driver.RetainArchive)
	c := b.claim(t, "r", 2, time.Minute)
	_, err := b.drv.Release(b.ctx, driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}, ids[10:11])
	require.NoError(t, err)
	_, err = b.drv.MarkFailed(b.ctx, driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}, 5,
		[]driver.Failure{{ID: ids[11], Error: "x", Permanent: true}})
	require.NoError(t, err)
	delivered := ids[:10]

	top, err := b.drv.MaxEventID(b.ctx)
	require.NoError(t, err)
	require.Equal(t, ids[11], top)
	n, err := b.drv.CountReplay(b.ctx, driver.ReplayParams{})
	require.NoError(t, err)
	require.EqualValues(t, 10, n)
	n, err = b.drv.CountReplay(b.ctx, driver.ReplayParams{Filter: driver.Filter{AggregateID: "9"}, AfterID: ids[2]})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	// Batches of 3 walk the merged sides in ID order.
	var got []int64
	p := driver.ReplayParams{UpToID: top, Limit: 3}
	for p.AfterID < top {
		events, next, err := b.drv.ReplayBatch(b.ctx, p)
		require.NoError(t, err)
		require.LessOrEqual(t, len(events), 3)
		for _, e := range events {
			require.Equal(t, driver.StatusProcessed, e.Status)
			require.False(t, e.ProcessedAt.IsZero())
			got = append(got, e.ID)
		}
		require.Greater(t, next, p.AfterID, "a batch always moves on")
		p.AfterID = next
	}
	require.Equal(t, delivered, got)

	// Through the Manager, with a filter on both sides; the rows stay.
	before := b.db.Count(t, b.db.Table)
	rec := outboxtest.NewRecorder()
	res, err := b.mgr.ReplayTo(context.Background(), rec, outbox.ReplayParams{
		EventFilter: outbox.EventFilter{EventType: "e"}, BatchSize: 4})
	require.NoError(t, err)
	require.EqualValues(t, 10, res.Published)
	require.Equal(t, delivered, eventIDs(rec.Events()))
	require.Equal(t, before, b.db.Count(t, b.db.Table))
	require.Equal(t, 6, b.db.Count(t, b.db.Archive))
	require.Equal(t, driver.StatusPending, b.get(t, ids[10]).Status)
}
