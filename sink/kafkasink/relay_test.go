package kafkasink_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/kafkasink"
	"github.com/outboxkit/outbox/sinktest"
)

// reader reads topic back with a real consumer, from the start: the
// CloudEvents attributes are the ce_ headers and content-type.
func (c *cluster) reader(t *testing.T, topic string) func(t *testing.T) []sinktest.Received {
	t.Helper()
	consumer, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(consumer.Close)
	var got []sinktest.Received
	return func(t *testing.T) []sinktest.Received {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		fetches := consumer.PollFetches(ctx)
		for _, fe := range fetches.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) {
				require.NoError(t, fe.Err, "fetch %s[%d]", fe.Topic, fe.Partition)
			}
		}
		for _, r := range fetches.Records() {
			attrs := map[string]string{}
			for _, h := range r.Headers {
				switch {
				case strings.HasPrefix(h.Key, kafkasink.HeaderPrefix):
					attrs[strings.TrimPrefix(h.Key, kafkasink.HeaderPrefix)] = string(h.Value)
				case h.Key == kafkasink.HeaderContentType:
					attrs["datacontenttype"] = string(h.Value)
				case h.Key == outbox.HeaderTraceParent || h.Key == outbox.HeaderTraceState:
					attrs[h.Key] = string(h.Value)
				}
			}
			got = append(got, sinktest.Received{Attributes: attrs, Payload: r.Value, Message: r})
		}
		return got
	}
}

// relayHarness reads topic back.
func (c *cluster) relayHarness(t *testing.T, s outbox.Sink, topic string) sinktest.RelayHarness {
	t.Helper()
	return sinktest.RelayHarness{
		Sink:      s,
		Received:  c.reader(t, topic),
		Stored:    func(t *testing.T) int { return int(c.count(t, topic)) },
		ErrorText: "kafkasink",
	}
}

func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 4)
	h := c.relayHarness(t, newSink(t, c.config(t, topic)), topic)
	partitionOf := map[string]int32{}
	h.Check = func(t *testing.T, stored outbox.Event, got sinktest.Received) {
		r := got.Message.(*kgo.Record)
		require.Equal(t, stored.AggregateID, string(r.Key), "the key is the aggregate ID")
		if stored.AggregateID == "" {
			require.Nil(t, r.Key, "an event without aggregate ID has no key")
		}
		if p, ok := partitionOf[string(r.Key)]; ok && len(r.Key) > 0 {
			require.Equal(t, p, r.Partition, "one aggregate, one partition")
		}
		partitionOf[string(r.Key)] = r.Partition
	}
	sinktest.RelayEndToEnd(t, h)
}

func TestRelayBrokerDown(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 2)
	f := newFaults(t)
	cfg := c.config(t, topic)
	cfg.Dial = f.dial
	h := c.relayHarness(t, newSink(t, cfg), topic)
	h.Faults = f
	// A produce to a broker that is down waits for the context.
	h.SinkTimeout = 500 * time.Millisecond
	sinktest.RelayBrokerDown(t, h)
}

func TestRelayPoisonEventDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 1)
	sinktest.RelayPoison(t, c.relayHarness(t, newSink(t, c.config(t, topic)), topic),
		sinktest.Poison{
			Message: outbox.Message{EventType: "order.poison", Headers: map[string]string{route.Header: "bad topic!"}, Payload: map[string]int{}},
			Error:   "Kafka topic names hold only",
		},
		sinktest.Poison{
			Message: outbox.Message{EventType: "order.huge", Payload: map[string]string{"blob": strings.Repeat("x", 1500_000)}},
			Error:   "MESSAGE_TOO_LARGE",
		},
	)
}
