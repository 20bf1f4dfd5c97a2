package redissink_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/internal/testutil/relaytest"
	"github.com/outboxkit/outbox/sink/redissink"
)

func TestMain(m *testing.M) { relaytest.VerifyTestMain(m) }

// server is the Redis the tests use.
var server = brokertest.Broker{Name: "Redis", Env: "TEST_REDIS_URL", Default: "redis://127.0.0.1:6379/0", Port: "6379"}

// uniqueKey is a key unique to this test run, deleted when the test ends.
func uniqueKey(t *testing.T, rdb *redis.Client) string {
	key := brokertest.UniqueName(t, "outbox-test.", ".")
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
	return key
}

// admin is a test's own client for reading streams.
func admin(t *testing.T) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(server.URL())
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		server.Unreachable(t, err)
	}
	return rdb
}

// entries reads a whole stream.
func entries(t *testing.T, rdb *redis.Client, stream string) []redis.XMessage {
	t.Helper()
	msgs, err := rdb.XRange(context.WithoutCancel(t.Context()), stream, "-", "+").Result()
	require.NoError(t, err)
	return msgs
}

// newSink returns a connected sink closed when the test ends.
func newSink(t *testing.T, cfg redissink.Config) *redissink.Sink {
	t.Helper()
	if cfg.URL == "" && cfg.Client == nil {
		cfg.URL = server.URL()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return brokertest.Open(t, func(ctx context.Context) (*redissink.Sink, error) { return redissink.New(ctx, cfg) })
}
