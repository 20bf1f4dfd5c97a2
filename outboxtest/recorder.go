package outboxtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
)

// Recorder is a Sink that records every event it accepts: all of them,
// unless SetFail makes it reject some. It is safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	events []outbox.Event
	calls  int
	fail   func(outbox.Event) error
	notify chan struct{}
}

// NewRecorder returns an empty Recorder that accepts every event.
func NewRecorder() *Recorder { return &Recorder{notify: make(chan struct{}, 1)} }

// SetFail makes the recorder return fail's result for each event: nil
// records the event as delivered, an error fails it (wrap it with
// outbox.Permanent to dead-letter at once). nil restores accepting all.
func (r *Recorder) SetFail(fail func(outbox.Event) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = fail
}

// Publish records events, in batch order. With outbox.KeyOrdered(ctx), once
// an event fails the later events of its aggregate in the batch are not
// recorded and get outbox.ErrEarlierEventFailed.
func (r *Recorder) Publish(ctx context.Context, events []outbox.Event) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	errs := make([]error, len(events))
	var failed map[[2]string]int64 // key-ordered: the failed event of an aggregate
	if outbox.KeyOrdered(ctx) {
		failed = make(map[[2]string]int64)
	}
	for i, e := range events {
		key := [2]string{e.AggregateType, e.AggregateID}
		if id, ok := failed[key]; ok {
			errs[i] = fmt.Errorf("outboxtest: event %d: %w (event %d)", e.ID, outbox.ErrEarlierEventFailed, id)
			continue
		}
		switch {
		case ctx.Err() != nil:
			errs[i] = ctx.Err()
		case r.fail != nil:
			errs[i] = r.fail(e)
		}
		if errs[i] != nil {
			if failed != nil {
				failed[key] = e.ID
			}
			continue
		}
		r.events = append(r.events, e)
	}
	select {
	case r.notify <- struct{}{}:
	default:
	}
	return errs
}

// Events returns a copy of the delivered events, in delivery order.
func (r *Recorder) Events() []outbox.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]outbox.Event(nil), r.events...)
}

// Len returns how many events were delivered.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// Calls returns how many times Publish was called.
func (r *Recorder) Calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// WaitLen waits until at least n events were delivered, failing t after
// timeout.
func (r *Recorder) WaitLen(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for r.Len() < n {
		select {
		case <-r.notify:
		case <-deadline.C:
			t.Fatalf("outboxtest: %d events delivered after %v, want %d", r.Len(), timeout, n)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
