package outbox_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// keyedEvents returns events with IDs 1..len(keys), event i+1 of the
// aggregate ("order", keys[i]).
func keyedEvents(keys ...string) []outbox.Event {
	events := make([]outbox.Event, len(keys))
	for i, k := range keys {
		events[i] = outbox.Event{ID: int64(i + 1), AggregateType: "order", AggregateID: k}
	}
	return events
}

func TestKeyRuns(t *testing.T) {
	t.Parallel()
	events := keyedEvents("a", "b", "a", "c", "b", "a")
	events = append(events, outbox.Event{ID: 7, AggregateType: "invoice", AggregateID: "a"})
	require.Equal(t, [][]int{{0, 2, 5}, {1, 4}, {3}, {6}}, outbox.KeyRuns(events),
		"one run per (aggregate type, aggregate ID), in batch order")
	require.Empty(t, outbox.KeyRuns(nil))
}

// requireEarlierFailed checks that errs[i] says an earlier event failed.
func requireEarlierFailed(t *testing.T, errs []error, idx ...int) {
	t.Helper()
	for _, i := range idx {
		require.ErrorIs(t, errs[i], outbox.ErrEarlierEventFailed, "index %d", i)
		require.False(t, outbox.IsPermanent(errs[i]), "index %d: the relay spends no attempt on it", i)
	}
}

func TestPublishKeyWaves(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	events := keyedEvents("a", "b", "a", "c", "b", "a", "b", "c")
	t.Run("one event per aggregate per wave", func(t *testing.T) {
		t.Parallel()
		errs := make([]error, len(events))
		var waves [][]int
		outbox.PublishKeyWaves(events, errs, nil, func(wave []int) {
			waves = append(waves, append([]int(nil), wave...))
		})
		require.Equal(t, [][]int{{0, 1, 3}, {2, 4, 7}, {5, 6}}, waves)
		require.Equal(t, make([]error, len(events)), errs)
	})
	t.Run("a failure stops its aggregate only", func(t *testing.T) {
		t.Parallel()
		errs := make([]error, len(events))
		var sent []int
		outbox.PublishKeyWaves(events, errs, nil, func(wave []int) {
			for _, i := range wave {
				sent = append(sent, i)
				if events[i].ID == 3 { // the second event of a
					errs[i] = boom
				}
			}
		})
		require.ErrorIs(t, errs[2], boom)
		requireEarlierFailed(t, errs, 5)
		require.Contains(t, errs[5].Error(), "event 3 of order/a")
		require.NotContains(t, sent, 5, "the later event of a is not sent")
		for _, i := range []int{0, 1, 3, 4, 6, 7} {
			require.NoError(t, errs[i])
			require.Contains(t, sent, i)
		}
	})
	t.Run("an event failed before sending", func(t *testing.T) {
		t.Parallel()
		errs := make([]error, len(events))
		errs[1] = outbox.Permanent(boom) // the first event of b
		var sent []int
		outbox.PublishKeyWaves(events, errs, nil, func(wave []int) { sent = append(sent, wave...) })
		require.ElementsMatch(t, []int{0, 2, 3, 5, 7}, sent)
		require.True(t, outbox.IsPermanent(errs[1]), "its own error is kept")
		requireEarlierFailed(t, errs, 4, 6)
	})
	t.Run("together", func(t *testing.T) {
		t.Parallel()
		// Events 1-3 of a go to one partition, event 6 to another.
		topic := []string{"p", "q", "p", "q", "q", "r", "q", "q"}
		together := func(earlier, later int) bool { return topic[earlier] == topic[later] }
		errs := make([]error, len(events))
		var waves [][]int
		outbox.PublishKeyWaves(events, errs, together, func(wave []int) {
			waves = append(waves, append([]int(nil), wave...))
			for _, i := range wave {
				if events[i].ID == 5 { // b's second: the destination fails the rest of its partition too
					errs[4], errs[6] = boom, boom
				}
			}
		})
		require.Equal(t, [][]int{{0, 2, 1, 4, 6, 3, 7}, {5}}, waves)
		require.ErrorIs(t, errs[4], boom)
		requireEarlierFailed(t, errs, 6)
		for _, i := range []int{0, 1, 2, 3, 5, 7} {
			require.NoError(t, errs[i])
		}
	})
}

func TestPublishKeyRuns(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	// 4 aggregates, 5 events each, interleaved.
	keys := make([]string, 0, 20)
	for range 5 {
		keys = append(keys, "a", "b", "c", "d")
	}
	events := keyedEvents(keys...)
	errs := make([]error, len(events))
	errs[14] = boom // c's fourth event failed before sending

	var (
		mu       sync.Mutex
		sent     = map[string][]int64{}
		inFlight = map[string]bool{}
		started  = make(chan struct{}, len(events))
	)
	allStarted := make(chan struct{})
	var once sync.Once
	outbox.PublishKeyRuns(events, errs, 4, func(i int) error {
		e := events[i]
		mu.Lock()
		require.False(t, inFlight[e.AggregateID], "two events of %s in flight at once", e.AggregateID)
		inFlight[e.AggregateID] = true
		sent[e.AggregateID] = append(sent[e.AggregateID], e.ID)
		mu.Unlock()
		started <- struct{}{}
		if i < 4 {
			// The first event of each aggregate waits until all four are
			// in flight: the aggregates go concurrently.
			if len(started) == 4 {
				once.Do(func() { close(allStarted) })
			}
			select {
			case <-allStarted:
			case <-time.After(5 * time.Second):
				return errors.New("the aggregates did not run concurrently")
			}
		}
		mu.Lock()
		inFlight[e.AggregateID] = false
		mu.Unlock()
		if e.ID == 6 { // b's second event
			return boom
		}
		return nil
	})
	require.Equal(t, []int64{1, 5, 9, 13, 17}, sent["a"], "one aggregate's events one after another, in batch order")
	require.Equal(t, []int64{2, 6}, sent["b"], "nothing after b's failure")
	require.Equal(t, []int64{3, 7, 11}, sent["c"], "nothing from the event that failed before sending")
	require.Equal(t, []int64{4, 8, 12, 16, 20}, sent["d"])
	require.ErrorIs(t, errs[5], boom)
	requireEarlierFailed(t, errs, 9, 13, 17, 18)
	for _, i := range []int{0, 1, 2, 3, 4, 6, 7, 8, 10, 11, 12, 15, 16, 19} {
		require.NoError(t, errs[i], fmt.Sprintf("index %d", i))
	}
}

// BenchmarkPublishKeyWaves measures what the key-ordered path adds to a
// batch of 1000 events, with a publish that does nothing:
//
//	go test . -run '^$' -bench PublishKeyWaves
func BenchmarkPublishKeyWaves(b *testing.B) {
	for _, keys := range []int{1000, 10} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			events := make([]outbox.Event, 1000)
			for i := range events {
				events[i] = outbox.Event{ID: int64(i), AggregateType: "order", AggregateID: fmt.Sprintf("order-%d", i%keys)}
			}
			errs := make([]error, len(events))
			for b.Loop() {
				outbox.PublishKeyWaves(events, errs, nil, func([]int) {})
			}
		})
	}
}
