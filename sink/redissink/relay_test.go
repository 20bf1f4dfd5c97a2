package redissink_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/redissink"
	"github.com/outboxkit/outbox/sinktest"
)

// received reads stream back: each entry's fields are the CloudEvents
// attributes and the payload, as data.
func received(rdb *redis.Client, stream string) func(t *testing.T) []sinktest.Received {
	return func(t *testing.T) []sinktest.Received {
		var rs []sinktest.Received
		for _, m := range entries(t, rdb, stream) {
			r := sinktest.Received{Attributes: map[string]string{}, Message: m}
			for name, v := range m.Values {
				s, _ := v.(string)
				if name == "data" {
					r.Payload = []byte(s)
					continue
				}
				r.Attributes[name] = s
			}
			rs = append(rs, r)
		}
		return rs
	}
}

// relayHarness reads stream back.
func relayHarness(rdb *redis.Client, stream string, s outbox.Sink) sinktest.RelayHarness {
	return sinktest.RelayHarness{
		Sink: s, Received: received(rdb, stream),
		Stored:    func(t *testing.T) int { return len(entries(t, rdb, stream)) },
		ErrorText: "redissink",
	}
}

func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	rdb := admin(t)
	stream := uniqueKey(t, rdb)
	h := relayHarness(rdb, stream, newSink(t, redissink.Config{Router: fixed(t, stream), Source: "urn:test"}))
	h.Source = "urn:test"
	sinktest.RelayEndToEnd(t, h)
}

func TestRelayLosesNothingWhileServerIsDown(t *testing.T) {
	t.Parallel()
	rdb := admin(t)
	stream := uniqueKey(t, rdb)
	p := tcpproxy.Start(t, server.Addr(t))
	h := relayHarness(rdb, stream, newSink(t, redissink.Config{URL: server.URLVia(t, p.Addr()), Router: fixed(t, stream)}))
	h.Faults = p // go-redis dials again on the next command, not before
	sinktest.RelayBrokerDown(t, h)
}

func TestRelayDeadLettersPoisonWithoutBlockingOthers(t *testing.T) {
	t.Parallel()
	rdb := admin(t)
	stream := uniqueKey(t, rdb)
	notAStream := uniqueKey(t, rdb)
	require.NoError(t, rdb.Set(t.Context(), notAStream, "a string", 0).Err())
	sinktest.RelayPoison(t, relayHarness(rdb, stream, newSink(t, redissink.Config{Router: fixed(t, stream)})),
		sinktest.Poison{
			Message: outbox.Message{EventType: "order.created", Headers: map[string]string{route.Header: notAStream}, Payload: map[string]int{}},
			Error:   "holds a value that is not a stream",
		},
	)
}
