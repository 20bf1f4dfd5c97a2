package natssink_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/relaytest"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/natssink"
	"github.com/outboxkit/outbox/sinktest"
)

// reader reads b's stream back with a real JetStream consumer: the
// CloudEvents attributes are the ce- headers.
func (b *broker) reader(t *testing.T) func(t *testing.T) []sinktest.Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := b.js.OrderedConsumer(ctx, b.stream, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	var got []sinktest.Received
	return func(t *testing.T) []sinktest.Received {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(100*time.Millisecond))
		require.NoError(t, err)
		for m := range batch.Messages() {
			r := sinktest.Received{Attributes: map[string]string{}, Payload: m.Data(), Message: m}
			for name := range m.Headers() {
				switch {
				case strings.HasPrefix(name, natssink.HeaderPrefix):
					r.Attributes[strings.TrimPrefix(name, natssink.HeaderPrefix)] = m.Headers().Get(name)
				case name == outbox.HeaderTraceParent || name == outbox.HeaderTraceState:
					r.Attributes[name] = m.Headers().Get(name)
				}
			}
			got = append(got, r)
		}
		require.NoError(t, batch.Error())
		return got
	}
}

// relayHarness reads b's stream back.
func (b *broker) relayHarness(t *testing.T, s outbox.Sink) sinktest.RelayHarness {
	t.Helper()
	return sinktest.RelayHarness{
		Sink:      s,
		Received:  b.reader(t),
		Stored:    func(t *testing.T) int { return int(b.count(t)) },
		ErrorText: "natssink",
	}
}

func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	cfg := b.config(t)
	cfg.Router = mustRouter(t, b.prefix+".{aggregate_type}.{event_type}")
	h := b.relayHarness(t, newSink(t, cfg))
	h.Check = func(t *testing.T, _ outbox.Event, got sinktest.Received) {
		m := got.Message.(jetstream.Msg)
		require.Equal(t, b.prefix+".order.order.created", m.Subject())
		require.Equal(t, m.Headers().Get("ce-id"), m.Headers().Get(jetstream.MsgIDHeader), "Nats-Msg-Id is the event ID")
	}
	sinktest.RelayEndToEnd(t, h)
}

func TestRelayBrokerDown(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	proxy := tcpproxy.Start(t, natsAddr())
	cfg := b.config(t)
	cfg.Servers = []string{proxy.Addr()}
	cfg.ReconnectWait = 20 * time.Millisecond
	cfg.AckTimeout = time.Second
	h := b.relayHarness(t, newSink(t, cfg))
	h.Faults = proxy
	h.ReconnectsIdle = true // the client reconnects in the background
	h.Deduplicates = true   // Nats-Msg-Id within the stream's duplicate window
	sinktest.RelayBrokerDown(t, h)
}

func TestRelayPoisonEventDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	sinktest.RelayPoison(t, b.relayHarness(t, newSink(t, b.config(t))),
		sinktest.Poison{
			Message: outbox.Message{EventType: "order.poison", Headers: map[string]string{route.Header: b.prefix + ".bad subject"}, Payload: map[string]int{}},
			Error:   "whitespace",
		},
		sinktest.Poison{
			Message: outbox.Message{EventType: "order.huge", Payload: map[string]string{"blob": strings.Repeat("x", 1500_000)}},
			Error:   "max_payload",
		},
	)
}

// freezingSink publishes through its sink and then hangs, ignoring its
// context, like a relay process that froze (or was killed) after the
// broker stored its events and before it marked them processed.
type freezingSink struct {
	sink      outbox.Sink
	published chan struct{}
	thaw      chan struct{}
	once      sync.Once
}

func (f *freezingSink) Publish(ctx context.Context, events []outbox.Event) []error {
	errs := f.sink.Publish(ctx, events)
	f.once.Do(func() { close(f.published) })
	<-f.thaw
	return errs
}

func TestJetStreamDropsRepublishAfterRelayCrash(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	o := relaytest.NewTable(t)
	ids := o.Write(t, relaytest.Messages(25, "order.created")...)

	frozen := &freezingSink{sink: newSink(t, b.config(t)), published: make(chan struct{}), thaw: make(chan struct{})}
	o.StartRelay(t, outbox.RelayConfig{Sink: frozen, RelayID: "relay-a", Lease: 2 * time.Second, SinkTimeout: time.Second})
	t.Cleanup(func() { close(frozen.thaw) }) // runs before relay-a is stopped
	select {
	case <-frozen.published:
	case <-time.After(20 * time.Second):
		t.Fatal("relay-a never published")
	}
	require.Equal(t, uint64(len(ids)), b.count(t), "relay-a's publish reached the stream")
	require.Zero(t, o.Stats(t).Processed, "relay-a never marked its events")

	// Another relay, with its own connection, takes the events over once
	// relay-a's lease expires and publishes them again.
	hook := &relaytest.BatchHook{}
	o.StartRelay(t, outbox.RelayConfig{
		Sink: newSink(t, b.config(t)), RelayID: "relay-b", Lease: 2 * time.Second, RescueInterval: 100 * time.Millisecond,
		Hooks: []outbox.Hook{hook},
	})
	o.WaitProcessed(t, len(ids), 30*time.Second)
	// The batch hook runs after the mark commits: wait for the last one.
	require.Eventually(t, func() bool { return hook.Published.Load() >= int64(len(ids)) }, 10*time.Second, 10*time.Millisecond,
		"relay-b published every event again")
	require.Equal(t, int64(len(ids)), hook.Published.Load(), "relay-b published every event exactly once")
	require.Equal(t, uint64(len(ids)), b.count(t), "JetStream dropped the re-published events: one message per event")
	require.Equal(t, "relay-b", o.Event(t, ids[0]).LockedBy)
}
