package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

// replayBundle is a schema holding delivered events, some archived and some
// kept as processed, beside pending and failed ones that a replay must
// leave out.
type replayBundle struct {
	relayBundle
	archived, processed, pending, failed []int64
}

// deliver runs a relay with retention until nothing is pending, then stops it.
func (b relayBundle) deliver(t *testing.T, retention outbox.Retention) {
	t.Helper()
	r, err := outbox.NewRelay(b.db, outbox.RelayConfig{Schema: b.schema, Sink: outboxtest.NewRecorder(), Retention: retention,
		PollInterval: 10 * time.Millisecond, HeartbeatInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, r.Start(b.ctx))
	testutil.WaitFor(t, 20*time.Second, "the relay to deliver every event", func() bool {
		s := b.stats(t)
		return s.Pending+s.Processing == 0
	})
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, r.Stop(ctx))
}

func setupReplay(t *testing.T) replayBundle {
	t.Helper()
	b := replayBundle{relayBundle: setupRelay(t)}
	typed := func(eventType string) func(int, *outbox.Message) {
		return func(i int, m *outbox.Message) { m.EventType = eventType; m.AggregateID = fmt.Sprint(i % 3) }
	}
	b.archived = b.write(t, 17, typed("order.created"))
	b.deliver(t, outbox.RetainArchive)
	b.processed = b.write(t, 13, typed("order.paid"))
	b.deliver(t, outbox.RetainProcessed)
	b.pending = b.write(t, 4, typed("order.created"))
	b.failed = b.write(t, 2, typed("order.created"))
	_, err := b.mgr.Discard(b.ctx, "test", b.failed...)
	require.NoError(t, err)
	return b
}

// rowsState is every row of the table and the archive, as the replay must
// leave them.
func (b replayBundle) rowsState(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, table := range []string{"outbox_events", "outbox_events_archive"} {
		rows, err := b.pool.Query(b.ctx, `SELECT format('%s %s %s %s %s %s', id, status, attempts, updated_at, processed_at, locked_until)
FROM `+pgx.Identifier{b.schema, table}.Sanitize()+` ORDER BY id`)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		out = append(out, table+":")
		out = append(out, got...)
	}
	return out
}

func eventIDs(events []outbox.Event) []int64 {
	ids := make([]int64, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

func TestReplayToPublishesDeliveredEventsUnchanged(t *testing.T) {
	t.Parallel()
	b := setupReplay(t)
	before := b.rowsState(t)
	delivered := slices.Concat(b.archived, b.processed)

	n, err := b.mgr.CountReplay(b.ctx, outbox.ReplayParams{})
	require.NoError(t, err)
	require.EqualValues(t, len(delivered), n, "dry-run count: archived and processed, not pending or failed")

	rec := outboxtest.NewRecorder()
	var progress []outbox.ReplayProgress
	res, err := b.mgr.ReplayTo(b.ctx, rec, outbox.ReplayParams{BatchSize: 5, Progress: func(p outbox.ReplayProgress) {
		progress = append(progress, p)
	}})
	require.NoError(t, err)
	require.Equal(t, delivered, eventIDs(rec.Events()), "every delivered event once, in ID order")
	require.EqualValues(t, len(delivered), res.Published)
	require.Equal(t, b.failed[len(b.failed)-1], res.UpToID, "bound: the highest ID at the start")
	require.Equal(t, res.UpToID, res.LastID)
	require.NotEmpty(t, progress)
	require.EqualValues(t, len(delivered), progress[len(progress)-1].Published)
	require.Equal(t, before, b.rowsState(t), "status, attempts and timestamps untouched")

	// Payloads and types come through as the relay sent them.
	first := rec.Events()[0]
	require.Equal(t, "order.created", first.EventType)
	require.JSONEq(t, `{"i":0}`, string(first.Payload))

	// Filters narrow both sides.
	for _, tc := range []struct {
		name string
		p    outbox.ReplayParams
		want []int64
	}{
		{"type in the archive", outbox.ReplayParams{EventFilter: outbox.EventFilter{EventType: "order.created"}}, b.archived},
		{"type in the table", outbox.ReplayParams{EventFilter: outbox.EventFilter{EventType: "order.paid", Status: outbox.StatusProcessed}}, b.processed},
		{"aggregate", outbox.ReplayParams{EventFilter: outbox.EventFilter{AggregateID: "1"}},
			slices.DeleteFunc(slices.Clone(delivered), func(id int64) bool {
				return !slices.Contains([]int64{b.archived[1], b.archived[4], b.archived[7], b.archived[10], b.archived[13], b.archived[16],
					b.processed[1], b.processed[4], b.processed[7], b.processed[10]}, id)
			})},
		{"after an ID", outbox.ReplayParams{AfterID: b.archived[10]}, delivered[11:]},
		{"up to an ID", outbox.ReplayParams{UpToID: b.processed[2]}, delivered[:len(b.archived)+3]},
		{"created before the start", outbox.ReplayParams{EventFilter: outbox.EventFilter{CreatedBefore: time.Now().Add(-time.Hour)}}, nil},
	} {
		n, err := b.mgr.CountReplay(b.ctx, tc.p)
		require.NoError(t, err, tc.name)
		require.EqualValues(t, len(tc.want), n, tc.name)
		rec := outboxtest.NewRecorder()
		_, err = b.mgr.ReplayTo(b.ctx, rec, tc.p)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, nilIfEmpty(eventIDs(rec.Events())), tc.name)
	}
}

func nilIfEmpty(ids []int64) []int64 {
	if len(ids) == 0 {
		return nil
	}
	return ids
}

// A sink that refuses an event stops the replay; LastID says where to
// resume, and the resumed replay delivers the rest.
func TestReplayToResumesAfterRefusal(t *testing.T) {
	t.Parallel()
	b := setupReplay(t)
	delivered := slices.Concat(b.archived, b.processed)
	bad := delivered[12]
	rec := outboxtest.NewRecorder()
	rec.SetFail(func(e outbox.Event) error {
		if e.ID == bad {
			return outbox.Permanent(errors.New("consumer down"))
		}
		return nil
	})
	res, err := b.mgr.ReplayTo(b.ctx, rec, outbox.ReplayParams{BatchSize: 5})
	require.ErrorContains(t, err, fmt.Sprintf("refused event %d", bad))
	require.Equal(t, delivered[11], res.LastID, "every event up to the one before the refused one")
	require.Subset(t, eventIDs(rec.Events()), delivered[:12])
	require.NotContains(t, eventIDs(rec.Events()), bad)

	rec2 := outboxtest.NewRecorder()
	res2, err := b.mgr.ReplayTo(b.ctx, rec2, outbox.ReplayParams{AfterID: res.LastID, BatchSize: 5})
	require.NoError(t, err)
	require.Equal(t, delivered[12:], eventIDs(rec2.Events()))
	require.EqualValues(t, len(delivered)-12, res2.Published)

	// A retryable refusal is published again until it goes through.
	failures := 2
	rec3 := outboxtest.NewRecorder()
	rec3.SetFail(func(e outbox.Event) error {
		if e.ID == bad && failures > 0 {
			failures--
			return errors.New("busy")
		}
		return nil
	})
	_, err = b.mgr.ReplayTo(b.ctx, rec3, outbox.ReplayParams{BatchSize: 50})
	require.NoError(t, err)
	got := eventIDs(rec3.Events())
	slices.Sort(got)
	require.Equal(t, delivered, got)
}

func TestReplayToRate(t *testing.T) {
	t.Parallel()
	b := setupReplay(t)
	rec := outboxtest.NewRecorder()
	start := time.Now()
	res, err := b.mgr.ReplayTo(b.ctx, rec, outbox.ReplayParams{Rate: 50})
	require.NoError(t, err)
	require.EqualValues(t, 30, res.Published)
	// 30 events at 50/s: the last publish waits until 20 events' worth
	// (0.4s) passed, in calls of 10.
	require.GreaterOrEqual(t, time.Since(start), 350*time.Millisecond)
	require.Equal(t, 3, rec.Calls())
}

func TestReplayToRejectsBadParams(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	for _, p := range []outbox.ReplayParams{
		{EventFilter: outbox.EventFilter{Status: outbox.StatusFailed}},
		{EventFilter: outbox.EventFilter{MinAttempts: 1}},
		{AfterID: -1},
		{BatchSize: outbox.ReplayBatchSizeMax + 1},
		{Rate: -1},
		{Rate: math.Inf(1)},
	} {
		_, err := b.mgr.ReplayTo(b.ctx, outboxtest.NewRecorder(), p)
		var ce *outbox.ConfigError
		require.ErrorAs(t, err, &ce, "%+v", p)
	}
	_, err := b.mgr.ReplayTo(b.ctx, nil, outbox.ReplayParams{})
	require.ErrorContains(t, err, "sink")
}
