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
// Several listeners may react to one event type (a notification and an
// audit record, say): register each under a name with HandleNamed. They run
// one after another, in registration order, and all of them run even when
// one fails; the event is delivered once every one succeeded, and a failing
// one fails the event, which is retried. Without a ledger, a retry runs
// every handler of the event again. With Config.Ledger, a HandlerLedger,
// each named handler's success is recorded per event, and a retry skips the
// handlers that already succeeded for it: one failing listener never
// re-runs the others. PostgresLedger keeps that record in a small table of
// the outbox's database.
//
// Delivery is at least once: a handler may see the same event again (after
// a crash, a lost lease or a retry, or, with a ledger, a crash between a
// handler's success and its record), so handlers should be idempotent, for
// example by keying their writes on Event.ID.
package handlersink

import (
	"cmp"
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
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
	// Ledger, when set, records which named handlers (HandleNamed)
	// succeeded for which event, so that a retried event skips them. It is
	// read once per Publish call for the whole batch, and written once per
	// named handler that succeeds. Handlers registered with Handle and
	// HandleAll are unnamed and always run. Nil for none: a retry runs
	// every handler again.
	Ledger HandlerLedger
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
	handlers map[string][]named
	fallback HandlerFunc
}

// named is one registered handler; name is empty for Handle's.
type named struct {
	name string
	fn   HandlerFunc
}

// HandlerLedger records the named handlers that succeeded for each event,
// so that a retry of the event runs only the others. Implementations must
// be safe for concurrent use. PostgresLedger is one; an inbox (consumer-side
// deduplication) can be another.
//
// The ledger keys on Event.UniqueID: the bare event ID ("42") for a relay
// of one schema, qualified by the tenant ("s_acme:42") and database for
// the relays of outbox.Tenants, whose schemas number their events apart.
// One ledger therefore serves every tenant and database a Sink serves; use
// one ledger per outbox table otherwise (the bare IDs of two tables
// collide).
type HandlerLedger interface {
	// Succeeded returns, for each of keys (Event.UniqueID) that has any,
	// the names of the handlers recorded as succeeded for it.
	Succeeded(ctx context.Context, keys []string) (map[string][]string, error)
	// RecordSuccess records that handler succeeded for the event of key
	// (Event.UniqueID). It is called right after the handler returned nil;
	// recording the same pair twice is not an error.
	RecordSuccess(ctx context.Context, key string, handler string) error
}

var _ outbox.Sink = (*Sink)(nil)

// New returns a sink with no handlers registered.
func New(cfg Config) *Sink {
	return &Sink{cfg: cfg.WithDefaults(), handlers: make(map[string][]named)}
}

// Handle registers fn as the one handler for events of eventType, replacing
// every handler registered for it before. It panics if eventType is empty
// or fn is nil, as http.ServeMux does for a bad registration.
func (s *Sink) Handle(eventType string, fn HandlerFunc) {
	if eventType == "" {
		panic("handlersink: Handle with an empty event type: use HandleAll for a fallback handler")
	}
	if fn == nil {
		panic(fmt.Sprintf("handlersink: Handle(%q) with a nil HandlerFunc", eventType))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers[eventType] = []named{{fn: fn}}
}

// HandleNamed adds fn, named name, to the handlers of events of eventType:
// an event is delivered once all of its type's handlers succeeded. A
// handler of that name registered before is replaced in its place; one
// registered with Handle is kept and runs first. The name identifies the
// handler in errors and in Config.Ledger, so keep it stable across
// releases (renaming a handler makes a retry run it again). It panics if
// eventType or name is empty, or fn is nil.
func (s *Sink) HandleNamed(eventType, name string, fn HandlerFunc) {
	switch {
	case eventType == "":
		panic("handlersink: HandleNamed with an empty event type")
	case name == "":
		panic(fmt.Sprintf("handlersink: HandleNamed(%q) with an empty name: name the handler, such as \"audit\"", eventType))
	case fn == nil:
		panic(fmt.Sprintf("handlersink: HandleNamed(%q, %q) with a nil HandlerFunc", eventType, name))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	hs := slices.Clone(s.handlers[eventType])
	if i := slices.IndexFunc(hs, func(h named) bool { return h.name == name }); i >= 0 {
		hs[i].fn = fn
	} else {
		hs = append(hs, named{name: name, fn: fn})
	}
	s.handlers[eventType] = hs
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

// handlersOf returns the handlers of eventType: its own, the fallback, or
// none. The slice is never changed after registration (HandleNamed copies).
func (s *Sink) handlersOf(eventType string) []named {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if hs, ok := s.handlers[eventType]; ok {
		return hs
	}
	if s.fallback != nil {
		return []named{{fn: s.fallback}}
	}
	return nil
}

// anyNamed reports whether an event of events has a named handler.
func (s *Sink) anyNamed(events []outbox.Event) bool {
	for i := range events {
		for _, h := range s.handlersOf(events[i].EventType) {
			if h.name != "" {
				return true
			}
		}
	}
	return false
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
	var (
		done map[string][]string
		keys []string
	)
	if s.cfg.Ledger != nil && s.anyNamed(events) {
		// Event IDs repeat across tenants and databases (each schema has
		// its own sequence): the ledger keys on the qualified ID, so that
		// tenant B's event 42 never skips a handler tenant A's event 42 ran.
		keys = make([]string, len(events))
		for i := range events {
			keys[i] = events[i].UniqueID()
		}
		var err error
		if done, err = s.cfg.Ledger.Succeeded(ctx, keys); err != nil {
			return outbox.BatchError(len(events), fmt.Errorf("handlersink: read the handler ledger: %w", err))
		}
	}
	handle := func(i int) error {
		if keys == nil {
			return s.handle(ctx, &events[i], "", nil)
		}
		return s.handle(ctx, &events[i], keys[i], done[keys[i]])
	}
	workers := min(s.cfg.Concurrency, len(events))
	switch {
	case outbox.KeyOrdered(ctx):
		outbox.PublishKeyRuns(events, errs, workers, handle)
	case workers == 1:
		for i := range events {
			errs[i] = handle(i)
		}
	default:
		next := make(chan int)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := range next {
					errs[i] = handle(i)
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

// handle runs one event's handlers, but the named ones in skip (recorded
// as succeeded for it under key in the ledger), and turns a panic into a
// retryable error.
func (s *Sink) handle(ctx context.Context, e *outbox.Event, key string, skip []string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("handlersink: event %d (%s) not handled: %w", e.ID, e.EventType, err)
	}
	hs := s.handlersOf(e.EventType)
	if len(hs) == 0 {
		return outbox.Permanent(fmt.Errorf("handlersink: no handler for event type %q (event %d): register one with Handle or HandleAll, then retry the dead-lettered events", e.EventType, e.ID))
	}
	if len(hs) == 1 && hs[0].name == "" {
		return s.run(ctx, e, hs[0])
	}
	// Every handler runs, even after one failed: they are independent
	// listeners, and with a ledger the ones that succeed are not run again.
	var (
		errs      []error
		permanent = true
	)
	for _, h := range hs {
		if h.name != "" && slices.Contains(skip, h.name) {
			continue
		}
		err := s.run(ctx, e, h)
		if err == nil && h.name != "" && s.cfg.Ledger != nil {
			if rerr := s.cfg.Ledger.RecordSuccess(ctx, cmp.Or(key, e.UniqueID()), h.name); rerr != nil {
				err = fmt.Errorf("handlersink: handler %q succeeded on event %s but recording it failed (it runs again on the retry): %w", h.name, e.UniqueID(), rerr)
			}
		}
		if err != nil {
			errs = append(errs, err)
			permanent = permanent && outbox.IsPermanent(err)
		}
	}
	switch {
	case len(errs) == 0:
		return nil
	case len(errs) == 1:
		return errs[0]
	case permanent:
		// Dead-letter only when no failure would pass on a retry.
		return outbox.Permanent(&HandlerErrors{Errs: errs})
	}
	return &HandlerErrors{Errs: errs}
}

// HandlerErrors is the error of an event on which several handlers failed.
// It is permanent (outbox.IsPermanent) only when every one of Errs is, so
// that a handler whose failure may pass gets its retry; it does not unwrap,
// for the same reason: find it with errors.As and look at Errs.
type HandlerErrors struct {
	Errs []error // one per failed handler, in registration order
}

// Error joins the handlers' errors.
func (e *HandlerErrors) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

// run calls one handler and turns a panic into a retryable error.
func (s *Sink) run(ctx context.Context, e *outbox.Event, h named) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{EventID: e.ID, EventType: e.EventType, Handler: h.name, Value: p, Stack: debug.Stack()}
		}
	}()
	if err := h.fn(ctx, *e); err != nil {
		if h.name != "" {
			return fmt.Errorf("handlersink: handler %q for %q failed on event %d: %w", h.name, e.EventType, e.ID, err)
		}
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
	Handler   string // the handler's name; empty for one registered with Handle or HandleAll
	Value     any    // the value passed to panic
	Stack     []byte // the panicking goroutine's stack, as runtime/debug.Stack formats it
}

// Error names the event and the panic value; the stack is in Stack.
func (e *PanicError) Error() string {
	if e.Handler != "" {
		return fmt.Sprintf("handlersink: handler %q for %q panicked on event %d: %v", e.Handler, e.EventType, e.EventID, e.Value)
	}
	return fmt.Sprintf("handlersink: handler for %q panicked on event %d: %v", e.EventType, e.EventID, e.Value)
}
