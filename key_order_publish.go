package outbox

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// aggregateKey is the key of per-aggregate order.
type aggregateKey struct{ typ, id string }

// KeyRuns groups the batch indexes of events by aggregate (the pair
// AggregateType, AggregateID): one run per aggregate, its indexes in batch
// order, the runs in the order of their first event. A sink's key-ordered
// path (see KeyOrdered) sends each run in sequence.
func KeyRuns(events []Event) [][]int {
	// Two passes, so that the runs share one backing array.
	runOf := make([]int, len(events))
	at := make(map[aggregateKey]int, len(events))
	var sizes []int
	for i := range events {
		k := aggregateKey{events[i].AggregateType, events[i].AggregateID}
		r, ok := at[k]
		if !ok {
			r = len(sizes)
			at[k] = r
			sizes = append(sizes, 0)
		}
		runOf[i] = r
		sizes[r]++
	}
	flat := make([]int, len(events))
	runs := make([][]int, len(sizes))
	off := 0
	for r, n := range sizes {
		runs[r] = flat[off : off : off+n]
		off += n
	}
	for i, r := range runOf {
		runs[r] = append(runs[r], i)
	}
	return runs
}

// earlierFailed is the result of an event not sent behind event failed.
func earlierFailed(e, failed *Event) error {
	return fmt.Errorf("event %d: %w (event %d of %s/%s)", e.ID, ErrEarlierEventFailed, failed.ID, failed.AggregateType, failed.AggregateID)
}

// failAfter sets the results of the events at rest, not sent because the
// event at index failed failed.
func failAfter(events []Event, errs []error, rest []int, failed int) {
	for _, i := range rest {
		errs[i] = earlierFailed(&events[i], &events[failed])
	}
}

// PublishKeyRuns is the key-ordered path (see KeyOrdered) of a sink that
// sends one event at a time, such as an HTTP request per event: each
// aggregate's events are sent one after another by send, the events of
// different aggregates concurrently on up to workers goroutines. send
// returns the event's result (nil when delivered). An event whose entry in
// errs is already set (it failed before sending, such as on an invalid
// route) is not sent; once an event fails, the later events of its
// aggregate are not sent and get an error wrapping ErrEarlierEventFailed.
// errs must have one entry per event; PublishKeyRuns sets them.
func PublishKeyRuns(events []Event, errs []error, workers int, send func(i int) error) {
	runs := KeyRuns(events)
	sendRun := func(run []int) {
		for j, i := range run {
			if errs[i] == nil {
				errs[i] = send(i)
			}
			if errs[i] != nil {
				failAfter(events, errs, run[j+1:], i)
				return
			}
		}
	}
	workers = min(workers, len(runs))
	if workers <= 1 {
		for _, run := range runs {
			sendRun(run)
		}
		return
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for r := int(next.Add(1) - 1); r < len(runs); r = int(next.Add(1) - 1) {
				sendRun(runs[r])
			}
		})
	}
	wg.Wait()
}

// PublishKeyWaves is the key-ordered path (see KeyOrdered) of a sink that
// pipelines a batch: publish sends the events at the batch indexes of one
// wave together (pipelined, concurrently) and sets their entries in errs
// (nil when delivered), touching no others; it may keep the wave slice,
// which lists each aggregate's events in batch order. Wave n holds the
// n-th event of every aggregate whose earlier events were all delivered,
// so one aggregate's events are acknowledged in batch order while all
// aggregates stay in flight together: a batch of distinct aggregates is
// one wave, as fast as the unordered path.
//
// together, when not nil, reports whether the event at index later may
// travel in the same wave as the event of its aggregate at index earlier
// (the one just before it), because the destination keeps their order and
// fails later when earlier fails, as one Kafka partition of an idempotent
// producer does. With together nil every wave holds at most one event per
// aggregate.
//
// An event whose entry in errs is already set (it failed before sending,
// such as on an invalid route) is not sent; once an event fails, the later
// events of its aggregate are not sent and get an error wrapping
// ErrEarlierEventFailed. An event of a wave that publish reports delivered
// after an earlier one of its wave failed keeps its nil result: it was
// delivered. errs must have one entry per event.
func PublishKeyWaves(events []Event, errs []error, together func(earlier, later int) bool, publish func(wave []int)) {
	runs := KeyRuns(events)
	// runs[r][pos[r]:end[r]] are run r's events in the current wave.
	pos := make([]int, len(runs))
	end := make([]int, len(runs))
	live := make([]int, len(runs)) // runs with events left to send
	for r := range live {
		live[r] = r
	}
	for len(live) > 0 {
		// A new slice for every wave: publish may hand it to a goroutine
		// that outlives its call once ctx ended.
		wave := make([]int, 0, len(live))
		n := 0
		for _, r := range live {
			run, j := runs[r], pos[r]
			if errs[run[j]] != nil { // failed before sending
				failAfter(events, errs, run[j+1:], run[j])
				continue
			}
			e := j + 1
			for together != nil && e < len(run) && errs[run[e]] == nil && together(run[e-1], run[e]) {
				e++
			}
			end[r] = e
			wave = append(wave, run[j:e]...)
			live[n] = r
			n++
		}
		live = live[:n]
		if len(wave) == 0 {
			return
		}
		publish(wave)
		n = 0
		for _, r := range live {
			run := runs[r]
			failed := -1
			for k := pos[r]; k < end[r]; k++ {
				if errs[run[k]] != nil {
					failed = k
					break
				}
			}
			switch {
			case failed >= 0:
				// The events after it in the wave were sent with it: the
				// destination failed them too (together's promise), or
				// delivered them, and said which.
				for k := failed + 1; k < end[r]; k++ {
					if errs[run[k]] != nil {
						errs[run[k]] = earlierFailed(&events[run[k]], &events[run[failed]])
					}
				}
				failAfter(events, errs, run[end[r]:], run[failed])
			case end[r] < len(run):
				pos[r] = end[r]
				live[n] = r
				n++
			}
		}
		live = live[:n]
	}
}
