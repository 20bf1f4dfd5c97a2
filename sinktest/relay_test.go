package sinktest_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/envelope"
	"github.com/outboxkit/outbox/sinktest"
)

// memoryBroker is the simplest correct broker: a sink that stores events
// in memory, which a Faults can take down, and that refuses events of type
// poison for good.
type memoryBroker struct {
	mu       sync.Mutex
	got      []sinktest.Received
	down     bool
	conns    int
	connOpen bool
}

func (b *memoryBroker) Publish(_ context.Context, events []outbox.Event) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down {
		return outbox.BatchError(len(events), outbox.Unavailable(errors.New("memorysink: the broker is down")))
	}
	if !b.connOpen {
		b.connOpen = true
		b.conns++
	}
	errs := make([]error, len(events))
	for i := range events {
		e := &events[i]
		if e.EventType == "poison" {
			errs[i] = outbox.Permanent(errors.New("memorysink: poison " + strconv.FormatInt(e.ID, 10)))
			continue
		}
		env := envelope.For(e, "")
		r := sinktest.Received{Attributes: map[string]string{}, Payload: e.Payload}
		for _, a := range env.Attributes {
			r.Attributes[a.Name] = a.Value
		}
		r.Attributes["traceparent"] = env.Trace.TraceParent
		b.got = append(b.got, r)
	}
	return errs
}

func (b *memoryBroker) received(*testing.T) []sinktest.Received {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]sinktest.Received(nil), b.got...)
}

func (b *memoryBroker) stored(t *testing.T) int { return len(b.received(t)) }

func (b *memoryBroker) Refuse() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.down, b.connOpen = true, false
}

func (b *memoryBroker) Allow() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.down = false
}

func (b *memoryBroker) Cut() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.connOpen = false
}

func (b *memoryBroker) Accepted() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conns
}

func (b *memoryBroker) harness() sinktest.RelayHarness {
	return sinktest.RelayHarness{
		Sink: b, Received: b.received, Stored: b.stored, Faults: b,
		ErrorText: "memorysink", Deduplicates: true,
	}
}

func TestRelayScenariosPassAMemoryBroker(t *testing.T) {
	t.Parallel()
	t.Run("EndToEnd", func(t *testing.T) {
		t.Parallel()
		sinktest.RelayEndToEnd(t, (&memoryBroker{}).harness())
	})
	t.Run("BrokerDown", func(t *testing.T) {
		t.Parallel()
		sinktest.RelayBrokerDown(t, (&memoryBroker{}).harness())
	})
	t.Run("Poison", func(t *testing.T) {
		t.Parallel()
		sinktest.RelayPoison(t, (&memoryBroker{}).harness(),
			sinktest.Poison{Message: outbox.Message{EventType: "poison", Payload: 1}, Error: "memorysink: poison"},
			sinktest.Poison{Message: outbox.Message{EventType: "poison", Payload: 2}, Error: "memorysink: poison"},
		)
	})
}

func TestDeliveriesOfFeedsTheConformanceSuite(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(*testing.T) sinktest.Harness {
		b := &memoryBroker{}
		return sinktest.Harness{Sink: b, Delivered: sinktest.DeliveriesOf(b.received)}
	})
}
