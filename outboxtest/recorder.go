package outboxtest

import (
	"context"
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

// Publish records events.
func (r *Recorder) Publish(ctx context.Context, events []outbox.Event) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	errs := make([]error, len(events))
	for i, e := range events {
		if err := ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		if r.fail != nil {
			if errs[i] = r.fail(e); errs[i] != nil {
				continue
			}
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
