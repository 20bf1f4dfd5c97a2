package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
)

// Discard is a sink that accepts every event and does nothing with it: the
// bench's default, so the numbers measure the outbox and the database.
type Discard struct{}

// Publish accepts events.
func (Discard) Publish(context.Context, []outbox.Event) []error { return nil }

// recorder wraps the bench's sink: it counts deliveries and failures, spots
// duplicates and keeps each event's first ack time. Event IDs in a scratch
// schema come from a fresh sequence, so they index a slice.
type recorder struct {
	inner outbox.Sink
	start time.Time // ack times are kept as nanoseconds after start

	mu         sync.Mutex
	acks       []int64 // by event ID: first ack, 0 when none yet
	delivered  int64   // distinct events acknowledged
	duplicates int64
	failed     int64
	firstErr   error
	changed    chan struct{} // signalled after every Publish
}

// maxTrackedID bounds the ack slice; a larger ID (not expected in a fresh
// schema) is counted but not tracked.
const maxTrackedID = 1 << 28

func newRecorder(inner outbox.Sink, expected int) *recorder {
	return &recorder{inner: inner, start: time.Now(), acks: make([]int64, 0, expected+1), changed: make(chan struct{}, 1)}
}

func (r *recorder) Publish(ctx context.Context, events []outbox.Event) []error {
	errs := r.inner.Publish(ctx, events)
	ack := max(time.Since(r.start).Nanoseconds(), 1)
	if errs != nil && len(errs) != len(events) {
		// A sink bug; the relay retries the whole batch.
		errs = outbox.BatchError(len(events), fmt.Errorf("sink returned %d results for %d events", len(errs), len(events)))
	}
	r.mu.Lock()
	for i := range events {
		if errs != nil && errs[i] != nil {
			r.failed++
			if r.firstErr == nil {
				r.firstErr = errs[i]
			}
			continue
		}
		id := events[i].ID
		if id <= 0 || id >= maxTrackedID {
			r.delivered++
			continue
		}
		if need := int(id) + 1; need > len(r.acks) {
			r.acks = slices.Grow(r.acks, need-len(r.acks))[:need]
		}
		if r.acks[id] != 0 {
			r.duplicates++
			continue
		}
		r.acks[id] = ack
		r.delivered++
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
	return errs
}

// counts returns distinct deliveries, duplicates and failures so far.
func (r *recorder) counts() (delivered, duplicates, failed int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.delivered, r.duplicates, r.failed
}

// err returns the first publish error, wrapped in errSinkFailed.
func (r *recorder) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed == 0 {
		return nil
	}
	return &sinkError{failed: r.failed, first: r.firstErr}
}

// ackedAt returns the time the event was first acknowledged.
func (r *recorder) ackedAt(id int64) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id <= 0 || int(id) >= len(r.acks) || r.acks[id] == 0 {
		return time.Time{}, false
	}
	return r.start.Add(time.Duration(r.acks[id])), true
}

// allAcked reports whether every ID in ids was acknowledged.
func (r *recorder) allAcked(ids []int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if id <= 0 || int(id) >= len(r.acks) || r.acks[id] == 0 {
			return false
		}
	}
	return true
}

// sinkError reports the events a sink rejected.
type sinkError struct {
	failed int64
	first  error
}

func (e *sinkError) Error() string {
	return fmt.Sprintf("%v: %d failed publishes, the first: %v", errSinkFailed, e.failed, e.first)
}

func (e *sinkError) Unwrap() []error { return []error{errSinkFailed, e.first} }
