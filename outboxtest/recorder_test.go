package outboxtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
)

func TestRecorder(t *testing.T) {
	t.Parallel()
	r := outboxtest.NewRecorder()
	events := []outbox.Event{{ID: 1, EventType: "a"}, {ID: 2, EventType: "b"}}
	require.Equal(t, []error{nil, nil}, r.Publish(context.Background(), events))
	r.WaitLen(t, 2, time.Second)

	boom := errors.New("boom")
	r.SetFail(func(e outbox.Event) error {
		if e.ID == 3 {
			return boom
		}
		return nil
	})
	errs := r.Publish(context.Background(), []outbox.Event{{ID: 3}, {ID: 4}})
	require.Equal(t, []error{boom, nil}, errs)
	require.Equal(t, []int64{1, 2, 4}, ids(r.Events()))
	require.Equal(t, 2, r.Calls())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errs = r.Publish(ctx, []outbox.Event{{ID: 5}})
	require.ErrorIs(t, errs[0], context.Canceled)
	require.Equal(t, 3, r.Len())
}

func ids(events []outbox.Event) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}

func TestRecorderKeyOrdered(t *testing.T) {
	t.Parallel()
	r := outboxtest.NewRecorder()
	boom := errors.New("boom")
	r.SetFail(func(e outbox.Event) error {
		if e.ID == 3 {
			return boom
		}
		return nil
	})
	events := []outbox.Event{
		{ID: 1, AggregateType: "order", AggregateID: "a"},
		{ID: 2, AggregateType: "order", AggregateID: "b"},
		{ID: 3, AggregateType: "order", AggregateID: "a"},
		{ID: 4, AggregateType: "order", AggregateID: "b"},
		{ID: 5, AggregateType: "order", AggregateID: "a"},
		{ID: 6, AggregateType: "invoice", AggregateID: "a"},
	}
	errs := r.Publish(outbox.WithKeyOrder(t.Context()), events)
	require.ErrorIs(t, errs[2], boom)
	require.ErrorIs(t, errs[4], outbox.ErrEarlierEventFailed, "a's event after the failed one is held back")
	require.Equal(t, []int64{1, 2, 4, 6}, ids(r.Events()), "other aggregates are recorded, in batch order")

	// Unordered, the later event is recorded.
	errs = r.Publish(t.Context(), events)
	require.ErrorIs(t, errs[2], boom)
	require.NoError(t, errs[4])
}
