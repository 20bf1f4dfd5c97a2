package handlersink_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/handlersink"
	"github.com/outboxkit/outbox/sinktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The shared test pool of the ledger tests lives for the whole test binary.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/jackc/puddle/v2.(*Pool[...]).createIdleResources"),
	)
}

// recorder is a handler that remembers the events it was given.
type recorder struct {
	mu     sync.Mutex
	events []outbox.Event
}

func (r *recorder) handle(_ context.Context, e outbox.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	return nil
}

func (r *recorder) ids() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]int64, len(r.events))
	for i, e := range r.events {
		ids[i] = e.ID
	}
	return ids
}

func event(id int64, eventType string) outbox.Event {
	return outbox.Event{ID: id, EventType: eventType, Payload: []byte(`{}`)}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, concurrency := range []int{1, 4} {
		t.Run(fmt.Sprintf("Concurrency%d", concurrency), func(t *testing.T) {
			t.Parallel()
			sinktest.Run(t, func(t *testing.T) sinktest.Harness {
				var (
					mu      sync.Mutex
					got     []sinktest.Delivery
					failing atomic.Bool
					reject  atomic.Int64                  // an event ID whose handler fails
					stall   atomic.Pointer[chan struct{}] // release channel while stalled
					stalled = make(chan struct{}, 1)
				)
				s := handlersink.New(handlersink.Config{Concurrency: concurrency})
				s.HandleAll(func(ctx context.Context, e outbox.Event) error {
					if failing.Load() {
						return errors.New("read model database is down")
					}
					if e.ID == reject.Load() {
						return errors.New("invoice is locked")
					}
					if release := stall.Load(); release != nil {
						select {
						case stalled <- struct{}{}:
						default:
						}
						select {
						case <-*release:
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					mu.Lock()
					defer mu.Unlock()
					got = append(got, sinktest.Delivery{ID: e.ID, EventType: e.EventType, Payload: e.Payload})
					return nil
				})
				return sinktest.Harness{
					Sink: s,
					Delivered: func(*testing.T) []sinktest.Delivery {
						mu.Lock()
						defer mu.Unlock()
						return append([]sinktest.Delivery(nil), got...)
					},
					Stall: func(*testing.T) (<-chan struct{}, func()) {
						release := make(chan struct{})
						stall.Store(&release)
						var once sync.Once
						return stalled, func() { once.Do(func() { stall.Store(nil); close(release) }) }
					},
					Fail:   func(*testing.T) { failing.Store(true) },
					Reject: func(_ *testing.T, e *outbox.Event) { reject.Store(e.ID) },
				}
			})
		})
	}
}

func TestDispatchesByEventTypeWithFallback(t *testing.T) {
	t.Parallel()
	var created, paid, other recorder
	s := handlersink.New(handlersink.Config{})
	s.Handle("order.created", created.handle)
	s.Handle("order.paid", paid.handle)
	s.HandleAll(other.handle)

	errs := s.Publish(t.Context(), []outbox.Event{
		event(1, "order.created"), event(2, "order.paid"), event(3, "order.shipped"), event(4, "order.created"),
	})
	require.Nil(t, errs)
	require.Equal(t, []int64{1, 4}, created.ids())
	require.Equal(t, []int64{2}, paid.ids())
	require.Equal(t, []int64{3}, other.ids(), "the fallback only gets types without their own handler")
}

func TestHandlerGetsTheWholeEvent(t *testing.T) {
	t.Parallel()
	var r recorder
	s := handlersink.New(handlersink.Config{})
	s.HandleAll(r.handle)
	e := sinktest.NewEvent("order.created", `{"total":1}`)
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))
	require.Equal(t, []outbox.Event{e}, r.events)
}

func TestNoHandlerIsPermanentAndNamesTheType(t *testing.T) {
	t.Parallel()
	var r recorder
	s := handlersink.New(handlersink.Config{})
	s.Handle("order.created", r.handle)

	errs := s.Publish(t.Context(), []outbox.Event{event(1, "order.created"), event(2, "order.refunded"), event(3, "order.created")})
	require.Len(t, errs, 3)
	require.NoError(t, errs[0])
	require.NoError(t, errs[2])
	require.True(t, outbox.IsPermanent(errs[1]), "an unregistered type must be dead-lettered, not retried for ever")
	require.Contains(t, errs[1].Error(), `no handler for event type "order.refunded"`)
	require.Contains(t, errs[1].Error(), "Handle")
	require.Equal(t, []int64{1, 3}, r.ids())
}

func TestHandlerErrorsKeepTheirMeaning(t *testing.T) {
	t.Parallel()
	errTransient := errors.New("connection reset")
	errBad := errors.New("order has no lines")
	s := handlersink.New(handlersink.Config{})
	s.Handle("transient", func(context.Context, outbox.Event) error { return errTransient })
	s.Handle("bad", func(context.Context, outbox.Event) error { return outbox.Permanent(errBad) })
	s.Handle("ok", func(context.Context, outbox.Event) error { return nil })

	errs := s.Publish(t.Context(), []outbox.Event{event(1, "transient"), event(2, "bad"), event(3, "ok")})
	require.Len(t, errs, 3)
	require.ErrorIs(t, errs[0], errTransient)
	require.False(t, outbox.IsPermanent(errs[0]))
	require.Contains(t, errs[0].Error(), `handler for "transient" failed on event 1`)
	require.ErrorIs(t, errs[1], errBad)
	require.True(t, outbox.IsPermanent(errs[1]))
	require.NoError(t, errs[2])
}

func TestPanicIsRetryableForThatEventOnly(t *testing.T) {
	t.Parallel()
	for _, concurrency := range []int{1, 3} {
		t.Run(fmt.Sprintf("Concurrency%d", concurrency), func(t *testing.T) {
			t.Parallel()
			var r recorder
			s := handlersink.New(handlersink.Config{Concurrency: concurrency})
			s.HandleAll(r.handle)
			s.Handle("boom", func(context.Context, outbox.Event) error { panic("nil map") })
			s.Handle("boom.permanent", func(context.Context, outbox.Event) error {
				panic(outbox.Permanent(errors.New("looks permanent")))
			})

			errs := s.Publish(t.Context(), []outbox.Event{
				event(1, "ok"), event(2, "boom"), event(3, "ok"), event(4, "boom.permanent"), event(5, "ok"),
			})
			require.Len(t, errs, 5)
			for _, i := range []int{0, 2, 4} {
				require.NoError(t, errs[i])
			}
			require.ElementsMatch(t, []int64{1, 3, 5}, r.ids())

			var pe *handlersink.PanicError
			require.ErrorAs(t, errs[1], &pe)
			require.Equal(t, int64(2), pe.EventID)
			require.Equal(t, "boom", pe.EventType)
			require.Equal(t, "nil map", pe.Value)
			require.Contains(t, string(pe.Stack), "handlersink_test")
			require.Equal(t, `handlersink: handler for "boom" panicked on event 2: nil map`, errs[1].Error())
			require.False(t, outbox.IsPermanent(errs[1]))
			require.False(t, outbox.IsPermanent(errs[3]), "a panic is retryable whatever its value")
		})
	}
}

func TestConcurrencyOneHandlesInOrder(t *testing.T) {
	t.Parallel()
	var (
		r        recorder
		inFlight atomic.Int32
		overlap  atomic.Bool
	)
	s := handlersink.New(handlersink.Config{})
	s.HandleAll(func(ctx context.Context, e outbox.Event) error {
		if inFlight.Add(1) > 1 {
			overlap.Store(true)
		}
		defer inFlight.Add(-1)
		return r.handle(ctx, e)
	})
	events := make([]outbox.Event, 100)
	want := make([]int64, len(events))
	for i := range events {
		events[i] = event(int64(1000-i), "a") // IDs descending: order is the batch's, not the IDs'
		want[i] = events[i].ID
	}
	require.Nil(t, s.Publish(t.Context(), events))
	require.Equal(t, want, r.ids())
	require.False(t, overlap.Load(), "Concurrency 1 never runs two handlers at once")
}

func TestConcurrencyIsReachedAndNotExceeded(t *testing.T) {
	t.Parallel()
	const concurrency = 4
	var (
		inFlight, maxInFlight atomic.Int32
		entered               atomic.Int32
		allIn                 = make(chan struct{})
	)
	s := handlersink.New(handlersink.Config{Concurrency: concurrency})
	s.HandleAll(func(ctx context.Context, _ outbox.Event) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		// The first `concurrency` handlers wait for each other: this only
		// finishes if that many really run at once.
		if entered.Add(1) == concurrency {
			close(allIn)
		}
		select {
		case <-allIn:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	events := make([]outbox.Event, 3*concurrency)
	for i := range events {
		events[i] = event(int64(i+1), "a")
	}
	ctx, cancel := context.WithTimeout(t.Context(), sinktest.Timeout)
	defer cancel()
	require.Nil(t, s.Publish(ctx, events), "handlers did not run %d at once", concurrency)
	require.Equal(t, int32(concurrency), maxInFlight.Load())
}

func TestCancelledContextStopsTheBatch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var r recorder
	s := handlersink.New(handlersink.Config{})
	s.HandleAll(func(ctx context.Context, e outbox.Event) error {
		if e.ID == 2 {
			cancel() // the relay's sink timeout fires while event 2 is handled
		}
		return r.handle(ctx, e)
	})
	errs := s.Publish(ctx, []outbox.Event{event(1, "a"), event(2, "a"), event(3, "a"), event(4, "a")})
	require.Len(t, errs, 4)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1], "a handler that finished successfully delivered its event")
	for _, err := range errs[2:] {
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, outbox.IsPermanent(err))
		require.Contains(t, err.Error(), "not handled")
	}
	require.Equal(t, []int64{1, 2}, r.ids())
}

func TestRegistrationWhilePublishing(t *testing.T) {
	t.Parallel()
	s := handlersink.New(handlersink.Config{Concurrency: 2})
	var handled atomic.Int64
	count := func(context.Context, outbox.Event) error { handled.Add(1); return nil }
	s.HandleAll(count)
	// A handler may register handlers itself: Publish holds no lock while
	// a handler runs.
	s.Handle("register", func(context.Context, outbox.Event) error {
		s.Handle("registered.by.handler", count)
		return nil
	})

	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 200 {
			s.Handle(fmt.Sprintf("type.%d", i%10), count)
			s.HandleAll(count)
		}
	})
	for range 50 {
		errs := s.Publish(t.Context(), []outbox.Event{event(1, "type.3"), event(2, "register"), event(3, "unknown")})
		require.Nil(t, errs)
	}
	wg.Wait()
	require.Equal(t, int64(100), handled.Load())
}

func TestHandleReplaces(t *testing.T) {
	t.Parallel()
	var first, second recorder
	s := handlersink.New(handlersink.Config{})
	s.Handle("a", first.handle)
	s.Handle("a", second.handle)
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{event(1, "a")}))
	require.Empty(t, first.ids())
	require.Equal(t, []int64{1}, second.ids())
}

func TestBadRegistrationPanics(t *testing.T) {
	t.Parallel()
	s := handlersink.New(handlersink.Config{})
	ok := func(context.Context, outbox.Event) error { return nil }
	require.PanicsWithValue(t, "handlersink: Handle with an empty event type: use HandleAll for a fallback handler",
		func() { s.Handle("", ok) })
	require.PanicsWithValue(t, `handlersink: Handle("a") with a nil HandlerFunc`, func() { s.Handle("a", nil) })
	require.PanicsWithValue(t, "handlersink: HandleAll with a nil HandlerFunc", func() { s.HandleAll(nil) })
}

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	require.Equal(t, handlersink.ConcurrencyDefault, handlersink.Config{}.WithDefaults().Concurrency)
	require.Equal(t, handlersink.ConcurrencyDefault, handlersink.Config{Concurrency: -3}.WithDefaults().Concurrency)
	require.Equal(t, 8, handlersink.Config{Concurrency: 8}.WithDefaults().Concurrency)
}
