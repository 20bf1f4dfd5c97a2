package kafkasink

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
)

// brokerState follows, through the client's hooks, whether the brokers
// answer: the client retries produces on its own while they do not, so a
// broker outage shows in Publish only as records whose acks never come,
// which alone cannot tell an outage from a slow broker.
type brokerState struct {
	failing atomic.Bool // the last connect or read failed
}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (b *brokerState) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		b.record(false)
	}
}

// OnBrokerRead implements kgo.HookBrokerRead.
func (b *brokerState) OnBrokerRead(_ kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	b.record(err == nil)
}

// record notes the outcome of the latest connect or read; it runs on every
// broker response, so it takes no lock.
func (b *brokerState) record(ok bool) { b.failing.Store(!ok) }

// down reports whether the last word from the brokers was a failure.
func (b *brokerState) down() bool { return b.failing.Load() }

var (
	_ kgo.HookBrokerConnect = (*brokerState)(nil)
	_ kgo.HookBrokerRead    = (*brokerState)(nil)
)

// Health asks a broker for its API versions; the relay probes with it
// while the sink's circuit is open. It implements outbox.HealthChecker.
func (s *Sink) Health(ctx context.Context) error {
	if err := s.client.Ping(ctx); err != nil {
		return outbox.Unavailable(fmt.Errorf("kafkasink: no broker of %s answers: %s", s.brokers, s.scrub(err.Error())))
	}
	return nil
}

var _ outbox.HealthChecker = (*Sink)(nil)
