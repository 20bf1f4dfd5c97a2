package sinktest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// interleaved returns perKey events for each of keys aggregates, taking
// turns (a1 b1 c1 a2 b2 c2 …), each aggregate's events numbered in its
// payload.
func interleaved(keys, perKey int) []outbox.Event {
	base := ids.Add(1) // aggregate IDs unique in the test binary
	events := make([]outbox.Event, 0, keys*perKey)
	for n := range perKey {
		for k := range keys {
			e := NewEvent("sinktest.ordered", fmt.Sprintf(`{"key":%d,"n":%d}`, k, n))
			e.AggregateID = fmt.Sprintf("sinktest-%d-%d", base, k)
			events = append(events, e)
		}
	}
	return events
}

// requireKeyOrder checks that, at the destination, each aggregate of sent
// got its events (first deliveries) in batch order, and that none of
// notSent arrived.
func requireKeyOrder(t *testing.T, h Harness, sent, notSent []outbox.Event) {
	t.Helper()
	key := func(e *outbox.Event) string { return e.AggregateType + "/" + e.AggregateID }
	byID := make(map[int64]*outbox.Event, len(sent)+len(notSent))
	want := make(map[string][]int64)
	for i := range sent {
		e := &sent[i]
		byID[e.ID] = e
		want[key(e)] = append(want[key(e)], e.ID)
	}
	for i := range notSent {
		byID[notSent[i].ID] = &notSent[i]
	}
	seen := make(map[int64]bool)
	got := make(map[string][]int64)
	for _, d := range h.Delivered(t) {
		e, ok := byID[d.ID]
		if !ok || seen[d.ID] {
			continue
		}
		seen[d.ID] = true
		got[key(e)] = append(got[key(e)], d.ID)
	}
	for _, e := range notSent {
		require.False(t, seen[e.ID], "event %d of %s came after one of its aggregate that failed: it must not be sent", e.ID, key(&e))
	}
	for k, ids := range want {
		require.Equal(t, ids, got[k], "aggregate %s: its events must reach the destination in batch order", k)
	}
}

func testKeyOrder(t *testing.T, h Harness) {
	// Five aggregates with eight events each, taking turns, and ten
	// aggregates of one event.
	events := interleaved(5, 8)
	events = append(events, interleaved(10, 1)...)
	ctx := outbox.WithKeyOrder(t.Context())
	requireNoErrors(t, publish(ctx, t, h.Sink, events))
	waitDelivered(t, h, events)
	requireKeyOrder(t, h, events, nil)
}

func testKeyOrderAfterFailure(t *testing.T, h Harness) {
	if h.Reject == nil {
		t.Skip("sinktest: the harness has no Reject: the destination cannot be made to refuse one event")
	}
	// a1 b1 c1 a2 b2 c2 a3 b3 c3 a4 b4 c4, with a2 refused.
	events := interleaved(3, 4)
	const rejected = 3
	h.Reject(t, &events[rejected])
	require.Equal(t, events[0].AggregateID, events[rejected].AggregateID, "sinktest: Harness.Reject must keep the aggregate")
	errs := h.Sink.Publish(outbox.WithKeyOrder(t.Context()), events)
	require.Len(t, errs, len(events), "a batch with a failed event has one result per event")

	require.Error(t, errs[rejected], "event %d was refused; the sink must not report it delivered", events[rejected].ID)
	require.NotErrorIs(t, errs[rejected], outbox.ErrEarlierEventFailed, "event %d is the first of its aggregate to fail: its error says why", events[rejected].ID)
	var ok, notSent []outbox.Event
	for i, e := range events {
		switch {
		case i == rejected:
		case e.AggregateID == events[rejected].AggregateID && i > rejected:
			require.ErrorIs(t, errs[i], outbox.ErrEarlierEventFailed,
				"event %d comes after event %d of its aggregate, which failed: it must not be sent", e.ID, events[rejected].ID)
			require.False(t, outbox.IsPermanent(errs[i]), "event %d: the relay spends no attempt on an event held back: %v", e.ID, errs[i])
			notSent = append(notSent, e)
		default:
			require.NoError(t, errs[i], "event %d: a failure of another aggregate must not hold it back", e.ID)
			ok = append(ok, e)
		}
	}
	waitDelivered(t, h, ok)
	requireKeyOrder(t, h, ok, notSent)
}
