package natssink_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/internal/testutil/relaytest"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/natssink"
)

func TestMain(m *testing.M) { relaytest.VerifyTestMain(m) }

// natsAddr is the JetStream-enabled server the tests use:
// OUTBOX_TEST_NATS_ADDR, or the local one.
func natsAddr() string {
	if a := os.Getenv("OUTBOX_TEST_NATS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:4222"
}

// quiet is a logger that drops everything.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// broker is a test's view of the real NATS server: an admin connection and
// a stream of its own.
type broker struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream string // stream name
	prefix string // first token of every subject the stream stores
}

// connect opens an admin connection to the test server, closed when t ends.
// An unreachable server fails the test with a message saying how to start
// one; it never skips.
func connect(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect("nats://"+natsAddr(), nats.Name("outbox-natssink-test"))
	require.NoError(t, err, "NATS with JetStream is not reachable at %s (set OUTBOX_TEST_NATS_ADDR): start it with nats-server -js", natsAddr())
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

// newBroker creates a stream of the test's own storing prefix.>, deleted
// when t ends.
func newBroker(t *testing.T) *broker {
	t.Helper()
	nc, js := connect(t)
	id := brokertest.RandomName()
	b := &broker{nc: nc, js: js, stream: "OUTBOX_TEST_" + strings.ToUpper(id), prefix: "t" + id}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: b.stream, Subjects: []string{b.prefix + ".>"}, Storage: jetstream.MemoryStorage, Duplicates: time.Minute,
	})
	require.NoError(t, err)
	t.Cleanup(func() { deleteStream(t, js, b.stream) })
	return b
}

func deleteStream(t *testing.T, js jetstream.JetStream, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, name); err != nil && !strings.Contains(err.Error(), "not found") {
		t.Errorf("delete stream %s: %v", name, err)
	}
}

// count returns how many messages the stream holds.
func (b *broker) count(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := b.js.Stream(ctx, b.stream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	return info.State.Msgs
}

// messages returns the stream's messages with sequence numbers from
// first on, in order.
func (b *broker) messages(t *testing.T, first uint64) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.js.Stream(ctx, b.stream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []*jetstream.RawStreamMsg
	for seq := max(first, info.State.FirstSeq); seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		out = append(out, m)
	}
	return out
}

// config returns a sink configuration for the test server that routes
// every event into b's stream.
func (b *broker) config(t *testing.T) natssink.Config {
	t.Helper()
	return natssink.Config{
		Servers: []string{natsAddr()},
		Router:  mustRouter(t, b.prefix+".{event_type}"),
		Logger:  quiet,
	}
}

// newSink returns a connected sink, closed when t ends.
func newSink(t *testing.T, cfg natssink.Config) *natssink.Sink {
	t.Helper()
	return brokertest.Open(t, func(ctx context.Context) (*natssink.Sink, error) { return natssink.New(ctx, cfg) })
}

func mustRouter(t testing.TB, template string) *route.Router {
	t.Helper()
	r, err := route.New(template)
	require.NoError(t, err)
	return r
}
