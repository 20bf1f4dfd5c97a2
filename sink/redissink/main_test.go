package redissink_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/sink/redissink"
	"github.com/outboxkit/outbox/sinktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The shared test pool lives for the whole test binary.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/jackc/puddle/v2.(*Pool[...]).createIdleResources"),
	)
}

// serverURLDefault is the local Redis.
const serverURLDefault = "redis://127.0.0.1:6379/0"

// serverURL is TEST_REDIS_URL, or serverURLDefault.
func serverURL() string {
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		return u
	}
	return serverURLDefault
}

// serverAddr is the server's host:port.
func serverAddr(t testing.TB) string {
	u, err := url.Parse(serverURL())
	require.NoError(t, err)
	if u.Port() == "" {
		return u.Hostname() + ":6379"
	}
	return u.Host
}

// urlVia is the server URL with its host replaced by addr (a proxy).
func urlVia(t testing.TB, addr string) string {
	u, err := url.Parse(serverURL())
	require.NoError(t, err)
	u.Host = addr
	return u.String()
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// uniqueKey is a key unique to this test run, deleted when the test ends.
func uniqueKey(t *testing.T, rdb *redis.Client) string {
	base := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "-")
	if len(base) > 60 {
		base = base[:60]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	key := "outbox-test." + base + "." + hex.EncodeToString(b[:])
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
	return key
}

// admin is a test's own client for reading streams.
func admin(t *testing.T) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(serverURL())
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("Redis is not reachable at TEST_REDIS_URL (default %s): %v; start it (see DEVELOPERS.md) or set TEST_REDIS_URL", serverURLDefault, err)
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

// deliveries maps a stream's entries for sinktest.
func deliveries(rdb *redis.Client, stream string) func(t *testing.T) []sinktest.Delivery {
	return func(t *testing.T) []sinktest.Delivery {
		var ds []sinktest.Delivery
		for _, m := range entries(t, rdb, stream) {
			id, err := strconv.ParseInt(m.Values["id"].(string), 10, 64)
			require.NoError(t, err)
			ds = append(ds, sinktest.Delivery{ID: id, EventType: m.Values["type"].(string), Payload: []byte(m.Values["data"].(string))})
		}
		return ds
	}
}

// newSink returns a connected sink closed when the test ends.
func newSink(t *testing.T, cfg redissink.Config) *redissink.Sink {
	t.Helper()
	if cfg.URL == "" && cfg.Client == nil {
		cfg.URL = serverURL()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := redissink.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}
