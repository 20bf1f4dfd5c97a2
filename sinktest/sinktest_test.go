package sinktest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/relaytest"
	"github.com/outboxkit/outbox/sinktest"
)

func TestMain(m *testing.M) { relaytest.VerifyTestMain(m) }

// memorySink is the simplest correct sink: it stores events in memory.
// The suite must pass it with every optional capability enabled.
type memorySink struct {
	mu      sync.Mutex
	got     []sinktest.Delivery
	failing atomic.Bool
	stall   atomic.Pointer[chan struct{}]
	stalled chan struct{}
	reject  sync.Map // event IDs it refuses
}

func (s *memorySink) Publish(ctx context.Context, events []outbox.Event) []error {
	if len(events) == 0 {
		return nil
	}
	if s.failing.Load() {
		return outbox.BatchError(len(events), errors.New("memory full"))
	}
	if release := s.stall.Load(); release != nil {
		select {
		case s.stalled <- struct{}{}:
		default:
		}
		select {
		case <-*release:
		case <-ctx.Done():
			return outbox.BatchError(len(events), ctx.Err())
		}
	}
	if err := ctx.Err(); err != nil {
		return outbox.BatchError(len(events), err)
	}
	errs := make([]error, len(events))
	store := func(i int) error {
		e := &events[i]
		if _, ok := s.reject.Load(e.ID); ok {
			return fmt.Errorf("event %d refused", e.ID)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.got = append(s.got, sinktest.Delivery{ID: e.ID, EventType: e.EventType, Payload: slices.Clone(e.Payload)})
		return nil
	}
	if outbox.KeyOrdered(ctx) {
		outbox.PublishKeyRuns(events, errs, 4, store)
	} else {
		for i := range events {
			errs[i] = store(i)
		}
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

func TestSuitePassesACorrectSink(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(t *testing.T) sinktest.Harness {
		s := &memorySink{stalled: make(chan struct{}, 1)}
		return sinktest.Harness{
			Sink: s,
			Delivered: func(*testing.T) []sinktest.Delivery {
				s.mu.Lock()
				defer s.mu.Unlock()
				return slices.Clone(s.got)
			},
			Stall: func(*testing.T) (<-chan struct{}, func()) {
				release := make(chan struct{})
				s.stall.Store(&release)
				var once sync.Once
				return s.stalled, func() { once.Do(func() { close(release) }) }
			},
			Fail:   func(*testing.T) { s.failing.Store(true) },
			Reject: func(_ *testing.T, e *outbox.Event) { s.reject.Store(e.ID, true) },
		}
	})
}

func TestNewEventIsComplete(t *testing.T) {
	t.Parallel()
	a := sinktest.NewEvent("order.created", `{"a":1}`)
	b := sinktest.NewEvent("order.created", `{"a":1}`)
	require.NotEqual(t, a.ID, b.ID, "IDs are unique")
	require.Equal(t, "order.created", a.EventType)
	require.Equal(t, `{"a":1}`, string(a.Payload))
	require.NotEmpty(t, a.AggregateType)
	require.NotEmpty(t, a.AggregateID)
	require.NotEmpty(t, a.CorrelationID())
	require.NotEmpty(t, a.Headers[outbox.HeaderTraceParent])
	require.False(t, a.CreatedAt.IsZero())
	require.False(t, a.AvailableAt.IsZero())
}
