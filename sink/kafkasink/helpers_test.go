package kafkasink_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/internal/testutil/relaytest"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/kafkasink"
)

func TestMain(m *testing.M) { relaytest.VerifyTestMain(m) }

// BrokersEnv names a real cluster to run the tests against instead of an
// in-process kfake cluster: a comma-separated list of host:port. The
// cluster must allow creating and deleting topics; every test makes topics
// of its own and deletes them.
const BrokersEnv = "OUTBOX_TEST_KAFKA_BROKERS"

// quiet is a logger that drops everything.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// cluster is a test's Kafka: a kfake cluster of its own, or the real
// cluster BrokersEnv names.
type cluster struct {
	brokers []string
	fake    *kfake.Cluster // nil for a real cluster
	admin   *kgo.Client
}

// newCluster returns the test's Kafka; a kfake cluster is closed when t
// ends.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{}
	if env := os.Getenv(BrokersEnv); env != "" {
		c.brokers = strings.Split(env, ",")
	} else {
		fake, err := kfake.NewCluster(kfake.NumBrokers(1))
		require.NoError(t, err)
		t.Cleanup(fake.Close)
		c.fake, c.brokers = fake, fake.ListenAddrs()
	}
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...))
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	c.admin = admin
	return c
}

// real reports whether the tests run against a real cluster.
func (c *cluster) real() bool { return c.fake == nil }

// topic creates a topic of the test's own with partitions partitions,
// deleted when t ends.
func (c *cluster) topic(t *testing.T, partitions int32) string {
	t.Helper()
	name := "outbox-test-" + brokertest.RandomName()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, -1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30_000
	resp, err := req.RequestWith(ctx, c.admin)
	require.NoError(t, err, "Kafka is not reachable at %v (%s)", c.brokers, BrokersEnv)
	require.Len(t, resp.Topics, 1)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].ErrorCode), "create topic %s", name)
	t.Cleanup(func() { c.deleteTopic(t, name) })
	return name
}

func (c *cluster) deleteTopic(t *testing.T, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TopicNames = []string{name}
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = &name
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30_000
	resp, err := req.RequestWith(ctx, c.admin)
	if err == nil && len(resp.Topics) == 1 {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Errorf("delete topic %s: %v", name, err)
	}
}

// count returns how many records topic holds: the sum of its partitions'
// end offsets (the topics are fresh and no one deletes from them).
func (c *cluster) count(t *testing.T, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = &topic
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, c.admin)
	require.NoError(t, err)
	require.Len(t, mresp.Topics, 1)
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range mresp.Topics[0].Partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p.Partition, -1 // the end offset
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.admin)
	require.NoError(t, err)
	var n int64
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			require.NoError(t, kerr.ErrorForCode(p.ErrorCode))
			n += p.Offset
		}
	}
	return n
}

// consume reads n records from topic with a real consumer, from the start.
func (c *cluster) consume(t *testing.T, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n {
		fetches := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "consumed %d of %d records from %s", len(got), n, topic)
		for _, fe := range fetches.Errors() {
			require.NoError(t, fe.Err, "fetch %s[%d]", fe.Topic, fe.Partition)
		}
		got = append(got, fetches.Records()...)
	}
	return got
}

// config returns a sink configuration for c that routes every event to
// topic.
func (c *cluster) config(t *testing.T, topic string) kafkasink.Config {
	t.Helper()
	r, err := route.New(topic)
	require.NoError(t, err)
	return kafkasink.Config{Brokers: c.brokers, Router: r, Logger: quiet}
}

// newSink returns a connected sink, closed when t ends.
func newSink(t *testing.T, cfg kafkasink.Config) *kafkasink.Sink {
	t.Helper()
	return brokertest.Open(t, func(ctx context.Context) (*kafkasink.Sink, error) { return kafkasink.New(ctx, cfg) })
}

// faults routes a sink's connections to the brokers through one TCP
// proxy per broker, so a test can cut them or make every broker look down.
type faults struct {
	t       *testing.T
	mu      sync.Mutex
	proxies map[string]*tcpproxy.Proxy
	refuse  bool
}

func newFaults(t *testing.T) *faults {
	return &faults{t: t, proxies: map[string]*tcpproxy.Proxy{}}
}

// dial is a Config.Dial that goes through the broker's proxy.
func (f *faults) dial(ctx context.Context, network, address string) (net.Conn, error) {
	f.mu.Lock()
	p, ok := f.proxies[address]
	if !ok {
		p = tcpproxy.Start(f.t, address)
		if f.refuse {
			p.Refuse()
		}
		f.proxies[address] = p
	}
	f.mu.Unlock()
	return new(net.Dialer).DialContext(ctx, network, p.Addr())
}

// Refuse cuts every connection and refuses new ones until Allow.
func (f *faults) Refuse() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = true
	for _, p := range f.proxies {
		p.Refuse()
	}
}

// Allow accepts connections again.
func (f *faults) Allow() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = false
	for _, p := range f.proxies {
		p.Allow()
	}
}

// Cut closes every open connection.
func (f *faults) Cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.proxies {
		p.Cut()
	}
}

// Accepted counts the connections the proxies forwarded.
func (f *faults) Accepted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.proxies {
		n += p.Accepted()
	}
	return n
}
