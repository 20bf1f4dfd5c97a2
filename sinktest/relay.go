package sinktest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/relaytest"
)

// RelayHarness is a sink wired to a real broker, for the relay scenarios
// RelayEndToEnd, RelayBrokerDown and RelayPoison. Each scenario writes
// events to an outbox table of its own in the test database
// (TEST_DATABASE_URL, default the local PostgreSQL), runs a real relay with
// Sink, and reads back what the broker got with Received. The sink routes
// every event where Received reads, and is closed by the test's cleanup.
type RelayHarness struct {
	// Sink is the sink under test. Required.
	Sink outbox.Sink
	// Received returns every message a consumer of the broker got so far
	// (or the broker stores), in any order, duplicates included. The
	// scenarios poll it. Required.
	Received func(t *testing.T) []Received
	// Stored, when set, returns how many messages the broker holds for the
	// test: RelayEndToEnd and RelayPoison then require exactly one per
	// delivered event, RelayBrokerDown at least one (exactly one with
	// Deduplicates).
	Stored func(t *testing.T) int

	// Source is the CloudEvents source the sink was configured with, for
	// RelayEndToEnd; empty means the default, /outbox.
	Source string
	// Check, when set, makes RelayEndToEnd's broker-specific checks of one
	// event: stored is the event as the outbox holds it, got the message
	// that carried it.
	Check func(t *testing.T, stored outbox.Event, got Received)

	// Faults breaks the connections between Sink and the broker, for
	// RelayBrokerDown. Required there.
	Faults Faults
	// SinkTimeout bounds each Publish call of RelayBrokerDown's relay.
	// Defaults to 2s.
	SinkTimeout time.Duration
	// ErrorText, when set, is text RelayBrokerDown requires in the error
	// that opened the relay's circuit while the broker was down, such as
	// the sink's name.
	ErrorText string
	// ReconnectsIdle says the sink reconnects on its own after a cut,
	// without a publish to drive it: RelayBrokerDown then waits for the
	// reconnect after each cut.
	ReconnectsIdle bool
	// Deduplicates says the broker drops an event published again (as
	// JetStream does by message ID): RelayBrokerDown then requires Stored
	// to be exactly one message per event despite the faults.
	Deduplicates bool
}

// Received is one message as a consumer of the broker got it.
type Received struct {
	// Attributes are the CloudEvents attributes by name (id, type, source,
	// subject, time, datacontenttype, aggregatetype, …, one per event
	// header) and the trace context (traceparent, tracestate), however the
	// sink's protocol binding carries them.
	Attributes map[string]string
	// Payload is the event's payload as the consumer got it.
	Payload []byte
	// Message is the broker client's own message, for RelayHarness.Check.
	Message any
}

// DeliveriesOf adapts a RelayHarness.Received to Harness.Delivered, so a
// sink's tests read their broker back one way for both: the id and type
// attributes become Delivery.ID and Delivery.EventType.
func DeliveriesOf(received func(t *testing.T) []Received) func(t *testing.T) []Delivery {
	return func(t *testing.T) []Delivery {
		var ds []Delivery
		for _, r := range received(t) {
			id, err := strconv.ParseInt(r.Attributes["id"], 10, 64)
			require.NoError(t, err, "the id attribute of a message")
			ds = append(ds, Delivery{ID: id, EventType: r.Attributes["type"], Payload: r.Payload})
		}
		return ds
	}
}

// Faults breaks the connections between a sink and its broker, such as a
// TCP proxy between them.
type Faults interface {
	// Refuse closes every open connection and refuses new ones until
	// Allow: the broker looks down.
	Refuse()
	// Allow accepts connections again.
	Allow()
	// Cut closes every open connection; new ones are accepted.
	Cut()
	// Accepted counts the connections made so far.
	Accepted() int
}

// Poison is an event no broker accepts, for RelayPoison.
type Poison struct {
	Message outbox.Message
	// Error is text the event's last_error must hold.
	Error string
}

func (h RelayHarness) check(t *testing.T) {
	t.Helper()
	require.NotNil(t, h.Sink, "sinktest: RelayHarness.Sink is nil")
	require.NotNil(t, h.Received, "sinktest: RelayHarness.Received is nil: the scenarios read back what the broker got")
}

// byID indexes what the broker got by the id attribute, keeping the first
// of duplicates.
func (h RelayHarness) byID(t *testing.T) map[string]Received {
	m := make(map[string]Received)
	for _, r := range h.Received(t) {
		if _, ok := m[r.Attributes["id"]]; !ok {
			m[r.Attributes["id"]] = r
		}
	}
	return m
}

// waitReceived waits until the broker got exactly the events ids, each at
// least once, and returns them by ID.
func (h RelayHarness) waitReceived(t *testing.T, ids []int64, timeout time.Duration) map[string]Received {
	t.Helper()
	var got map[string]Received
	testutil.WaitFor(t, timeout, fmt.Sprintf("%d events at the broker", len(ids)), func() bool {
		got = h.byID(t)
		return len(got) >= len(ids)
	})
	for _, id := range ids {
		require.Contains(t, got, strconv.FormatInt(id, 10), "event %d reached the broker", id)
	}
	require.Len(t, got, len(ids), "no stray IDs")
	return got
}

// RelayEndToEnd writes 120 events, relays them in batches of 50 and checks
// that each reached the broker exactly as stored: payload bytes, every
// CloudEvents attribute, extension attributes from the event's headers and
// the trace context, plus h.Check.
func RelayEndToEnd(t *testing.T, h RelayHarness) {
	h.check(t)
	tb := relaytest.NewTable(t)
	msgs := relaytest.Messages(120, "order.created")
	msgs[0].AggregateID = "" // no subject attribute
	ids := tb.Write(t, msgs...)
	tb.StartRelay(t, outbox.RelayConfig{Sink: h.Sink, BatchSize: 50})

	tb.WaitProcessed(t, len(ids), 30*time.Second)
	got := h.waitReceived(t, ids, 30*time.Second)
	if h.Stored != nil {
		require.Equal(t, len(ids), h.Stored(t), "each event once")
	}
	source := h.Source
	if source == "" {
		source = "/outbox"
	}
	for i, id := range ids {
		stored := tb.Event(t, id)
		r := got[strconv.FormatInt(id, 10)]
		a := r.Attributes
		require.Equal(t, string(stored.Payload), string(r.Payload), "payload bytes as stored")
		require.Equal(t, "1.0", a["specversion"])
		require.Equal(t, strconv.FormatInt(id, 10), a["id"])
		require.Equal(t, "order.created", a["type"])
		require.Equal(t, source, a["source"])
		require.Equal(t, msgs[i].AggregateID, a["subject"])
		require.Equal(t, stored.CreatedAt.UTC().Format(time.RFC3339Nano), a["time"], "time is the event's creation time")
		require.Equal(t, "application/json", a["datacontenttype"])
		require.Equal(t, "order", a["aggregatetype"])
		require.Equal(t, "corr-"+strconv.Itoa(i), a["correlationid"])
		require.Equal(t, "cmd-1", a["causationid"])
		require.Equal(t, "3", a["schemaversion"])
		require.Equal(t, "acme", a["tenant"])
		require.Equal(t, relaytest.TraceParent, a["traceparent"])
		if h.Check != nil {
			h.Check(t, stored, r)
		}
	}
}

// RelayBrokerDown runs a relay while the broker goes away in every way
// h.Faults can make it: down when the relay starts, cut while events keep
// coming and while the relay is idle, and down again in the middle of a
// backlog. While the broker refuses connections the sink's errors must say
// it is unreachable (outbox.Unavailable, or a refused dial), so the relay
// opens its circuit and spends no attempt: the events stay pending with
// none spent. No event may be lost or dead-lettered, and the sink must
// reconnect. Delivery is at least once: a message whose publish timed out
// may have landed as well as its retry.
func RelayBrokerDown(t *testing.T, h RelayHarness) {
	h.check(t)
	require.NotNil(t, h.Faults, "sinktest: RelayHarness.Faults is nil: RelayBrokerDown needs to break the connections")
	if h.SinkTimeout == 0 {
		h.SinkTimeout = 2 * time.Second
	}
	tb := relaytest.NewTable(t)
	f := h.Faults

	// Down at start: the relay begins while the broker refuses
	// connections.
	f.Refuse()
	all := tb.Write(t, relaytest.Messages(30, "order.created")...)
	hook := &relaytest.BatchHook{}
	circuit := &circuitHook{}
	tb.StartRelay(t, outbox.RelayConfig{
		Sink: h.Sink, BatchSize: 10, MaxAttempts: 10000, BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		Lease: 5 * time.Second, SinkTimeout: h.SinkTimeout, Hooks: []outbox.Hook{hook, circuit},
		ProbeInterval: 20 * time.Millisecond, ProbeIntervalMax: 200 * time.Millisecond,
	})
	// Retries 10-50ms apart would have spent attempts by the dozen in
	// the wait for three failed probes.
	testutil.WaitFor(t, 30*time.Second, "the sink's circuit opened and three probes failed while the broker was down", func() bool {
		return circuit.opened() >= 4
	})
	require.Contains(t, circuit.firstError(), h.ErrorText, "the error that opened the circuit names the sink")
	st := tb.Stats(t)
	require.Zero(t, st.Processed)
	require.Zero(t, st.Failed, "an unreachable broker dead-letters nothing")
	events, err := tb.Manager.ListEvents(t.Context(), outbox.ListParams{Limit: len(all)})
	require.NoError(t, err)
	for _, e := range events {
		require.Zero(t, e.Attempts, "event %d: an unreachable broker spends no attempts (last error %q)", e.ID, e.LastError)
	}
	require.Empty(t, h.Received(t))
	if h.Stored != nil {
		require.Zero(t, h.Stored(t))
	}
	f.Allow()
	tb.WaitProcessed(t, len(all), 30*time.Second)

	// Cut while events keep coming: once right after a write, when a
	// publish is likely in flight, once when the relay is idle.
	for round := range 4 {
		accepted := f.Accepted()
		for i := range 10 {
			msg := relaytest.Messages(1, "order.updated")[0]
			msg.AggregateID = fmt.Sprintf("o-%d", 100*(round+1)+i)
			all = append(all, tb.Write(t, msg)...)
		}
		if round%2 == 1 {
			tb.WaitProcessed(t, len(all), 15*time.Second)
		}
		f.Cut()
		if h.ReconnectsIdle {
			testutil.WaitFor(t, 10*time.Second, "a reconnect", func() bool { return f.Accepted() > accepted })
		}
	}
	tb.WaitProcessed(t, len(all), 20*time.Second)

	// Down mid-run: cut every connection after a few batches of a backlog,
	// then refuse connections for a while.
	var (
		cut, down, downSeen atomic.Bool
		opensAtDown         atomic.Int64
	)
	start := hook.Batches.Load()
	hook.Then(func(n int64, info outbox.BatchInfo) {
		switch {
		case n == start+3 && cut.CompareAndSwap(false, true):
			f.Cut()
		case n == start+6 && down.CompareAndSwap(false, true):
			opensAtDown.Store(int64(circuit.opened()))
			f.Refuse()
		case down.Load() && (info.Released > 0 || info.Retried > 0):
			downSeen.Store(true)
		}
	})
	for range 10 {
		all = append(all, tb.Write(t, relaytest.Messages(20, "order.shipped")...)...)
	}
	// With batches in flight the relay may have settled every batch it
	// held by the time the broker went down, and then finds the outage
	// in a probe, with no batch of its own.
	testutil.WaitFor(t, 20*time.Second, "the relay failed a batch or a probe while the broker was down mid-run", func() bool {
		return downSeen.Load() || down.Load() && int64(circuit.opened()) > opensAtDown.Load()
	})
	f.Allow()
	tb.WaitProcessed(t, len(all), 30*time.Second)
	st = tb.Stats(t)
	require.Zero(t, st.Failed+st.Pending+st.Processing, "nothing dead-lettered or left behind")
	require.True(t, cut.Load() && down.Load(), "both faults happened mid-run")
	require.Positive(t, circuit.closed(), "the circuit closed when the broker came back")

	// At least once: every event reached the broker; consumers dedupe on
	// the id attribute.
	h.waitReceived(t, all, 10*time.Second)
	require.GreaterOrEqual(t, len(h.Received(t)), len(all), "duplicates are allowed, losses are not")
	if h.Stored != nil {
		if h.Deduplicates {
			require.Equal(t, len(all), h.Stored(t), "every event is at the broker exactly once (re-publishes deduplicated)")
		} else {
			require.GreaterOrEqual(t, h.Stored(t), len(all))
		}
	}
	require.Greater(t, f.Accepted(), 2, "the sink reconnected")
}

// circuitHook records a relay's circuit changes.
type circuitHook struct {
	mu            sync.Mutex
	opens, closes int
	first         string
}

func (c *circuitHook) OnSinkState(_ context.Context, s outbox.SinkState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch s.Circuit {
	case outbox.CircuitOpen:
		c.opens++
		if c.first == "" && s.Err != nil {
			c.first = s.Err.Error()
		}
	case outbox.CircuitClosed:
		c.closes++
	}
}

func (c *circuitHook) opened() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opens
}

func (c *circuitHook) closed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closes
}

func (c *circuitHook) firstError() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first
}

// RelayPoison relays 10 good events, the poison events and 10 more good
// ones with at most 5 attempts each. Every poison event must be
// dead-lettered at its first attempt with its error text, without a retry
// and without holding back the good events.
func RelayPoison(t *testing.T, h RelayHarness, poison ...Poison) {
	h.check(t)
	require.NotEmpty(t, poison, "sinktest: RelayPoison needs poison events")
	tb := relaytest.NewTable(t)
	msgs := relaytest.Messages(10, "order.created")
	for _, p := range poison {
		msgs = append(msgs, p.Message)
	}
	msgs = append(msgs, relaytest.Messages(10, "order.created")...)
	ids := tb.Write(t, msgs...)
	hook := &relaytest.BatchHook{}
	tb.StartRelay(t, outbox.RelayConfig{Sink: h.Sink, MaxAttempts: 5, Hooks: []outbox.Hook{hook}})

	testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("20 processed and %d dead-lettered", len(poison)), func() bool {
		s := tb.Stats(t)
		return s.Processed == 20 && s.Failed == int64(len(poison))
	})
	good := slices.Concat(ids[:10], ids[10+len(poison):])
	h.waitReceived(t, good, 10*time.Second)
	if h.Stored != nil {
		require.Equal(t, 20, h.Stored(t))
	}
	for i, p := range poison {
		e := tb.Event(t, ids[10+i])
		require.Equal(t, outbox.StatusFailed, e.Status)
		require.Equal(t, 1, e.Attempts, "a permanent failure is dead-lettered at once")
		require.Contains(t, e.LastError, p.Error)
	}
	require.Zero(t, hook.Retried.Load(), "nothing was retried")
}
