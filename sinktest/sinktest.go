// Package sinktest is the conformance suite every outbox.Sink passes.
//
// A sink's own tests call Run with a function that builds a fresh Harness:
// the sink under test wired to a real destination (an HTTP server, a
// broker, an in-process handler) plus a way to read back what the
// destination received.
//
//	func TestConformance(t *testing.T) {
//		t.Parallel()
//		sinktest.Run(t, func(t *testing.T) sinktest.Harness {
//			srv := newRecordingServer(t)
//			return sinktest.Harness{Sink: mysink.New(srv.URL), Delivered: srv.Delivered}
//		})
//	}
//
// The suite checks the contract documented on outbox.Sink: one result per
// event (or a nil slice), an empty batch is fine, a nil result means the
// destination really received the event with its payload bytes unchanged,
// Publish may be called from many goroutines at once (run the suite under
// -race), Publish returns promptly once its context ends, and errors caused
// by a cancelled context are retryable, never permanent, and a destination
// that refuses connections fails every event with an error marked
// outbox.Unavailable (Harness.Unreachable). In key-ordered mode
// (outbox.WithKeyOrder) each aggregate's events of a batch that interleaves
// several aggregates arrive in batch order, and once one of them fails
// (Harness.Reject) the later ones are not sent and get
// outbox.ErrEarlierEventFailed while the other aggregates are delivered.
//
// # Relay scenarios
//
// RelayEndToEnd, RelayBrokerDown and RelayPoison run a real relay over an
// outbox table in the test database (TEST_DATABASE_URL, default the local
// PostgreSQL) with the sink under test, and read back what its broker got
// through a RelayHarness: every CloudEvents attribute as stored, nothing
// lost or dead-lettered while the broker is down or its connections are
// cut, and poison events dead-lettered at once without holding back the
// others. A sink's test keeps only what is its broker's own: how to read
// messages back, how to break its connections, which events poison it.
//
//	func TestRelayEndToEnd(t *testing.T) {
//		t.Parallel()
//		b := newBroker(t)
//		sinktest.RelayEndToEnd(t, sinktest.RelayHarness{Sink: b.sink(t), Received: b.received})
//	}
package sinktest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// Harness is one sink under test and the destination it delivers to. Run
// builds a fresh Harness for every check, so checks run in parallel without
// seeing each other's events.
type Harness struct {
	// Sink is the sink under test. Required.
	Sink outbox.Sink
	// Delivered returns every event the destination has received so far,
	// duplicates included. The suite polls it until the events it expects
	// show up, so a destination that receives asynchronously (a broker
	// consumer) only has to report what it has seen. Events of different
	// aggregates may come in any order, but one aggregate's events must
	// come in the order the destination got (or stores) them: the KeyOrder
	// checks read the order of each aggregate's first deliveries from it.
	// Required.
	Delivered func(t *testing.T) []Delivery
	// Stall, when set, makes every delivery from now on hang at the
	// destination until release is called. stalled must receive (or be
	// closed) once a delivery is hanging. The suite then cancels the
	// Publish context and checks that Publish returns promptly with
	// retryable errors. Leave it nil for a destination that cannot hang
	// (an io.Writer to memory).
	Stall func(t *testing.T) (stalled <-chan struct{}, release func())
	// Fail, when set, makes every delivery from now on fail at the
	// destination the way an outage does (an HTTP 503, a write error, a
	// handler's plain error). The suite then checks that no event is
	// reported delivered and that the errors are retryable.
	Fail func(t *testing.T)
	// Unreachable, when set, returns the sink under test with a
	// destination that refuses connections from now on: a sink pointed at
	// a closed port, or one connected through a proxy that now refuses
	// (and cuts) its connections. The suite then checks that every event
	// fails with an error marked outbox.Unavailable, so that the relay
	// spends no attempts while the destination is down, and that a sink
	// with a health check (outbox.HealthChecker) reports it unreachable.
	Unreachable func(t *testing.T) outbox.Sink
	// Reject, when set, changes e, an event with a small JSON payload,
	// so that it fails without changing its aggregate: at the destination
	// where it can refuse one message and take the next (a stream key of
	// the wrong type, a message over the stream's size limit, an HTTP 4xx
	// for its ID), else in the sink before sending (a route the
	// destination cannot carry, a record over the client's limit). The
	// suite then checks, in key-ordered mode (outbox.WithKeyOrder), that
	// the later events of its aggregate are not sent and get
	// outbox.ErrEarlierEventFailed while other aggregates are delivered.
	Reject func(t *testing.T, e *outbox.Event)
}

// Delivery is one event as the destination received it.
type Delivery struct {
	ID        int64
	EventType string
	Payload   []byte
}

// Timeout bounds how long the suite waits for Publish to return after its
// context was cancelled, and for deliveries to show up.
const Timeout = 5 * time.Second

// Run runs the conformance suite as parallel subtests of t. newHarness is
// called once per subtest with the subtest's t; register any cleanup with
// t.Cleanup.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	checks := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"EmptyBatch", testEmptyBatch},
		{"OneResultPerEvent", testOneResultPerEvent},
		{"PayloadUnchanged", testPayloadUnchanged},
		{"ConcurrentPublish", testConcurrentPublish},
		{"CancelledContext", testCancelledContext},
		{"CancelWhileStalled", testCancelWhileStalled},
		{"FailingDestination", testFailingDestination},
		{"UnreachableDestination", testUnreachableDestination},
		{"KeyOrder", testKeyOrder},
		{"KeyOrderAfterFailure", testKeyOrderAfterFailure},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			require.NotNil(t, h.Sink, "sinktest: Harness.Sink is nil")
			require.NotNil(t, h.Delivered, "sinktest: Harness.Delivered is nil: the suite needs to read back what the destination received")
			c.fn(t, h)
		})
	}
}

// ids hands out event IDs that are unique within the test binary, so a
// harness that shares a destination between subtests still tells their
// events apart.
var ids atomic.Int64

// payloads are compact JSON documents that sinks must deliver byte for
// byte: a sink that re-encodes JSON through map[string]any reorders keys,
// loses big-number precision or escapes HTML characters, and fails here.
var payloads = []string{
	`{}`,
	`[]`,
	`null`,
	`"just a string"`,
	`12345678901234567890123456789`,
	`{"z":1,"a":2,"m":[3,2,1]}`,
	`{"amount":1.10,"exp":1e+300,"neg":-0.0}`,
	`{"html":"<b>&amp;</b>","quote":"\"","backslash":"\\","ctl":"\u0001\n\t"}`,
	`{"unicode":"zoë 日本 🚀","escaped":"\u00e9\ud83d\ude80"}`,
	"{\"separators\":\"\u2028\u2029\"}", // valid JSON, but JavaScript-unsafe: encoding/json escapes them by default
	`{"nested":{"a":[{"b":{"c":[null,true,false]}}]}}`,
}

// NewEvent returns a fully populated event with a fresh ID and the given
// payload.
func NewEvent(eventType string, payload string) outbox.Event {
	id := ids.Add(1)
	now := time.Now().UTC().Truncate(time.Microsecond)
	return outbox.Event{
		ID:            id,
		EventType:     eventType,
		AggregateType: "order",
		AggregateID:   fmt.Sprintf("order-%d", id),
		Payload:       json.RawMessage(payload),
		Headers: map[string]string{
			outbox.HeaderCorrelationID: fmt.Sprintf("corr-%d", id),
			outbox.HeaderTraceParent:   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		},
		IdempotencyKey: fmt.Sprintf("order:%d", id),
		Status:         outbox.StatusProcessing,
		Attempts:       1,
		AvailableAt:    now,
		CreatedAt:      now.Add(-time.Second),
		UpdatedAt:      now,
	}
}

func newEvents(n int) []outbox.Event {
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = NewEvent("sinktest.created", fmt.Sprintf(`{"n":%d}`, i))
	}
	return events
}

// publish calls Publish and checks the shape of the answer: nil, or one
// result per event. It returns one entry per event either way.
func publish(ctx context.Context, t *testing.T, s outbox.Sink, events []outbox.Event) []error {
	t.Helper()
	errs := s.Publish(ctx, events)
	if errs == nil {
		return make([]error, len(events))
	}
	require.Len(t, errs, len(events), "Publish must return nil or exactly one result per event")
	return errs
}

// waitDelivered polls the destination until every event in want was
// received, then checks event type and payload bytes.
func waitDelivered(t *testing.T, h Harness, want []outbox.Event) {
	t.Helper()
	byID := make(map[int64]Delivery)
	missing := func() []int64 {
		for _, d := range h.Delivered(t) {
			byID[d.ID] = d
		}
		var m []int64
		for _, e := range want {
			if _, ok := byID[e.ID]; !ok {
				m = append(m, e.ID)
			}
		}
		return m
	}
	deadline := time.Now().Add(Timeout)
	for m := missing(); len(m) > 0; m = missing() {
		if time.Now().After(deadline) {
			require.Failf(t, "events reported delivered never reached the destination",
				"after %v, %d of %d events are missing, such as ID %d", Timeout, len(m), len(want), m[0])
		}
		time.Sleep(10 * time.Millisecond) // polling the destination, not waiting for our own goroutine
	}
	for _, e := range want {
		d := byID[e.ID]
		require.Equal(t, e.EventType, d.EventType, "event %d: event type", e.ID)
		require.Equal(t, string(e.Payload), string(d.Payload), "event %d: payload bytes changed in delivery", e.ID)
	}
}

// delivered returns the events whose result is nil.
func delivered(events []outbox.Event, errs []error) []outbox.Event {
	var ok []outbox.Event
	for i, err := range errs {
		if err == nil {
			ok = append(ok, events[i])
		}
	}
	return ok
}

func requireNoErrors(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		require.NoError(t, err, "event %d of the batch: a healthy destination must accept it", i)
	}
}

func testEmptyBatch(t *testing.T, h Harness) {
	for _, batch := range [][]outbox.Event{nil, {}} {
		errs := h.Sink.Publish(t.Context(), batch)
		require.Empty(t, errs, "an empty batch has no results")
	}
	// The sink still works after empty batches.
	events := newEvents(1)
	requireNoErrors(t, publish(t.Context(), t, h.Sink, events))
	waitDelivered(t, h, events)
}

func testOneResultPerEvent(t *testing.T, h Harness) {
	for _, n := range []int{1, 2, 7, 33} {
		events := newEvents(n)
		before := cloneEvents(events)
		requireNoErrors(t, publish(t.Context(), t, h.Sink, events))
		require.Equal(t, before, events, "Publish must not modify the events it was given")
		waitDelivered(t, h, events)
	}
}

func cloneEvents(events []outbox.Event) []outbox.Event {
	c := slices.Clone(events)
	for i := range c {
		c[i].Payload = slices.Clone(c[i].Payload)
		c[i].Headers = maps.Clone(c[i].Headers)
	}
	return c
}

func testPayloadUnchanged(t *testing.T, h Harness) {
	events := make([]outbox.Event, 0, len(payloads)+1)
	for _, p := range payloads {
		events = append(events, NewEvent("sinktest.payload", p))
	}
	// A payload larger than any buffer a sink is likely to use by default.
	big := `{"blob":"` + strings.Repeat("abcdefghij", 30_000) + `"}`
	events = append(events, NewEvent("sinktest.big", big))
	requireNoErrors(t, publish(t.Context(), t, h.Sink, events))
	waitDelivered(t, h, events)
}

func testConcurrentPublish(t *testing.T, h Harness) {
	const goroutines, batches, size = 8, 5, 4
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		all []outbox.Event
	)
	errCh := make(chan error, goroutines*batches*size)
	for range goroutines {
		wg.Go(func() {
			for range batches {
				events := newEvents(size)
				errs := h.Sink.Publish(t.Context(), events)
				if errs != nil && len(errs) != len(events) {
					errCh <- fmt.Errorf("publish returned %d results for %d events", len(errs), len(events))
					continue
				}
				for _, err := range errs {
					if err != nil {
						errCh <- err
					}
				}
				mu.Lock()
				all = append(all, events...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errCh)
	for err := range errCh {
		require.NoError(t, err, "concurrent Publish calls must all succeed")
	}
	require.Len(t, all, goroutines*batches*size)
	waitDelivered(t, h, all)
}

func testCancelledContext(t *testing.T, h Harness) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	events := newEvents(5)
	done := make(chan []error, 1)
	go func() { done <- h.Sink.Publish(ctx, events) }()
	var errs []error
	select {
	case errs = <-done:
	case <-time.After(Timeout):
		require.FailNow(t, "Publish did not return with a cancelled context", "waited %v", Timeout)
	}
	if errs == nil {
		errs = make([]error, len(events))
	}
	require.Len(t, errs, len(events))
	for i, err := range errs {
		if err != nil {
			require.False(t, outbox.IsPermanent(err), "event %d: a cancelled context is no reason to dead-letter: %v", i, err)
		}
	}
	// Whatever the sink reports delivered must have arrived.
	waitDelivered(t, h, delivered(events, errs))
}

func testCancelWhileStalled(t *testing.T, h Harness) {
	if h.Stall == nil {
		t.Skip("sinktest: the harness has no Stall: the destination cannot be made to hang")
	}
	stalled, release := h.Stall(t)
	defer release()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	events := newEvents(3)
	done := make(chan []error, 1)
	go func() { done <- h.Sink.Publish(ctx, events) }()
	select {
	case <-stalled:
	case errs := <-done:
		require.FailNow(t, "Publish returned before any delivery reached the stalled destination", "results: %v", errs)
	case <-time.After(Timeout):
		require.FailNow(t, "no delivery reached the stalled destination", "waited %v", Timeout)
	}
	cancel()
	var errs []error
	select {
	case errs = <-done:
	case <-time.After(Timeout):
		require.FailNow(t, "Publish did not return after its context was cancelled", "waited %v with the destination stalled", Timeout)
	}
	require.Len(t, errs, len(events), "events stuck at a stalled destination are not delivered")
	for i, err := range errs {
		require.Error(t, err, "event %d was stuck at a stalled destination and cannot be reported delivered", i)
		require.False(t, outbox.IsPermanent(err), "event %d: a cancelled context is no reason to dead-letter: %v", i, err)
	}
}

func testFailingDestination(t *testing.T, h Harness) {
	if h.Fail == nil {
		t.Skip("sinktest: the harness has no Fail: the destination cannot be made to fail")
	}
	h.Fail(t)
	events := newEvents(4)
	errs := h.Sink.Publish(t.Context(), events)
	require.Len(t, errs, len(events), "a failing destination must be reported, one error per event")
	for i, err := range errs {
		require.Error(t, err, "event %d: the destination failed, the sink must not report it delivered", i)
		require.NotEmpty(t, err.Error(), "event %d: error text becomes last_error; it must say something", i)
		require.False(t, outbox.IsPermanent(err), "event %d: an outage is transient; the sink must not dead-letter: %v", i, err)
	}
}

func testUnreachableDestination(t *testing.T, h Harness) {
	if h.Unreachable == nil {
		t.Skip("sinktest: the harness has no Unreachable: the destination cannot be made unreachable")
	}
	s := h.Unreachable(t)
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	defer cancel()
	events := newEvents(3)
	errs := s.Publish(ctx, events)
	require.Len(t, errs, len(events), "an unreachable destination must be reported, one error per event")
	for i, err := range errs {
		require.Error(t, err, "event %d: the destination refuses connections, the sink must not report it delivered", i)
		require.False(t, outbox.IsPermanent(err), "event %d: an outage is transient; the sink must not dead-letter: %v", i, err)
		require.True(t, outbox.IsUnavailable(err),
			"event %d: a destination that refuses connections must be reported with outbox.Unavailable, or the relay spends attempts on the outage: %v", i, err)
	}
	if hc, ok := s.(outbox.HealthChecker); ok {
		hctx, cancel := context.WithTimeout(t.Context(), Timeout)
		defer cancel()
		err := hc.Health(hctx)
		require.Error(t, err, "Health must report an unreachable destination")
		require.True(t, outbox.IsUnavailable(err), "Health's error must be marked outbox.Unavailable: %v", err)
	}
}
