// Package handlersink is an outbox.Sink that calls Go functions in the same
// process: for applications that consume their own events (update a read
// model, send an email, call another service) with the outbox's retries and
// dead-lettering instead of a broker.
//
// Register a HandlerFunc per event type with Handle, and optionally a
// fallback for every other type with HandleAll. The relay calls Publish
// with claimed batches; each event goes to its handler and the handler's
// error decides the event's fate:
//
//   - nil: the event is processed.
//   - an error: the event is retried with backoff.
//   - outbox.Permanent(err): the event is dead-lettered at once.
//   - a panic: recovered and treated as a retryable error for that event
//     alone; the other events of the batch are unaffected.
//
// An event with no handler gets a permanent error ("no handler for event
// type X"), so a missing registration shows up as dead-lettered events
// rather than events silently marked processed.
//
// Delivery is at least once: a handler may see the same event again (after
// a crash, a lost lease or a retry), so handlers should be idempotent, for
// example by keying their writes on Event.ID.
package handlersink

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/outboxkit/outbox"
)

// HandlerFunc handles one event. It must return when ctx ends: the relay
// bounds every batch by its sink timeout, and Publish waits for running
// handlers before it returns.
type HandlerFunc func(ctx context.Context, e outbox.Event) error

// ConcurrencyDefault is the default Config.Concurrency: events of a batch
// are handled one at a time, in order.
const ConcurrencyDefault = 1

// Config configures a Sink.
type Config struct {
	// Concurrency is how many events of one batch are handled at once.
	// With 1 the events of a batch are handled in order; above 1 their
	// order is not kept. Concurrent Publish calls (relay workers) each use
	// their own Concurrency. Defaults to ConcurrencyDefault; values below 1
	// mean the default.
	Concurrency int
}

// WithDefaults returns a copy of c with zero (or negative) fields set to
// their defaults.
func (c Config) WithDefaults() Config {
	if c.Concurrency < 1 {
		c.Concurrency = ConcurrencyDefault
	}
	return c
}

// Sink dispatches events to registered handlers. It is safe for concurrent
// use, and handlers may be registered while it publishes.
type Sink struct {
	cfg Config

	mu       sync.RWMutex
	handlers map[string]HandlerFunc
	fallback HandlerFunc
}

var _ outbox.Sink = (*Sink)(nil)

// New returns a sink with no handlers registered.
func New(cfg Config) *Sink {
	return &Sink{cfg: cfg.WithDefaults(), handlers: make(map[string]HandlerFunc)}
}

// Handle registers fn for events of eventType, replacing any handler
// registered for it before. It panics if eventType is empty or fn is nil,
// as http.ServeMux does for a bad registration.
func (s *Sink) Handle(eventType string, fn HandlerFunc) {
	if eventType == "" {
		panic("handlersink: Handle with an empty event type: use HandleAll for a fallback handler")
	}
	if fn == nil {
		panic(fmt.Sprintf("handlersink: Handle(%q) with a nil HandlerFunc", eventType))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers[eventType] = fn
}

// HandleAll registers fn for events whose type has no handler of its own,
// replacing any fallback registered before. It panics if fn is nil.
func (s *Sink) HandleAll(fn HandlerFunc) {
	if fn == nil {
		panic("handlersink: HandleAll with a nil HandlerFunc")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fallback = fn
}

// handler returns the handler for eventType: its own, the fallback, or nil.
func (s *Sink) handler(eventType string) HandlerFunc {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if fn, ok := s.handlers[eventType]; ok {
		return fn
	}
	return s.fallback
}

// Publish hands each event to its handler, up to Config.Concurrency at
// once, and returns one result per event (nil when every handler
// succeeded). Once ctx ends, events not yet started get ctx's error, which
// is retryable; Publish waits for handlers already running to return.
//
// With outbox.KeyOrdered(ctx), one aggregate's events are handled one after
// another, in batch order, while different aggregates still go
// concurrently; once a handler fails, the later events of its aggregate
// are not handled and get outbox.ErrEarlierEventFailed.
func (s *Sink) Publish(ctx context.Context, events []outbox.Event) []error {
	if len(events) == 0 {
		return nil
	}
	errs := make([]error, len(events))
	workers := min(s.cfg.Concurrency, len(events))
	switch {
	case outbox.KeyOrdered(ctx):
		outbox.PublishKeyRuns(events, errs, workers, func(i int) error { return s.handle(ctx, &events[i]) })
	case workers == 1:
		for i := range events {
			errs[i] = s.handle(ctx, &events[i])
		}
	default:
		next := make(chan int)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := range next {
					errs[i] = s.handle(ctx, &events[i])
				}
			})
		}
		for i := range events {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// handle runs one event's handler and turns a panic into a retryable error.
func (s *Sink) handle(ctx context.Context, e *outbox.Event) (err error) {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("handlersink: event %d (%s) not handled: %w", e.ID, e.EventType, err)
	}
	fn := s.handler(e.EventType)
	if fn == nil {
		return outbox.Permanent(fmt.Errorf("handlersink: no handler for event type %q (event %d): register one with Handle or HandleAll, then retry the dead-lettered events", e.EventType, e.ID))
	}
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{EventID: e.ID, EventType: e.EventType, Value: p, Stack: debug.Stack()}
		}
	}()
	if err := fn(ctx, *e); err != nil {
		return fmt.Errorf("handlersink: handler for %q failed on event %d: %w", e.EventType, e.ID, err)
	}
	return nil
}

// PanicError is the error for an event whose handler panicked. It is
// retryable (the panic may come from a passing state) even when the panic
// value is an error marked with outbox.Permanent, which is why it does not
// unwrap; find it with errors.As to inspect the value and the stack.
type PanicError struct {
	EventID   int64
	EventType string
	Value     any    // the value passed to panic
	Stack     []byte // the panicking goroutine's stack, as runtime/debug.Stack formats it
}

// Error names the event and the panic value; the stack is in Stack.
func (e *PanicError) Error() string {
	return fmt.Sprintf("handlersink: handler for %q panicked on event %d: %v", e.EventType, e.EventID, e.Value)
}
