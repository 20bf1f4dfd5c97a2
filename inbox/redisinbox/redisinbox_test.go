package redisinbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/redisinbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/relaytest"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/redissink"
)

func TestMain(m *testing.M) { relaytest.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

func redisClient(t *testing.T) *redis.Client {
	t.Helper()
	url := os.Getenv("TEST_REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Ping(context.Background()).Err(), "Redis is not reachable at TEST_REDIS_URL (default %s): start redis-server", url)
	return c
}

// The relay's redissink appends 20 events, then appends them all again (a
// relay that died before marking them); a consumer that died read 5 and
// never acknowledged them; one handler fails once. Two consumers of the
// group, each with its own Redis and database connections, apply every
// event's effect exactly once and leave nothing pending.
func TestConsumeAppliesEachEventOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redisClient(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	key := "outbox-redisinbox-" + hex.EncodeToString(b[:])
	t.Cleanup(func() { _ = rdb.Del(context.Background(), key).Err() })

	router, err := route.New(key)
	require.NoError(t, err)
	sink, err := redissink.New(ctx, redissink.Config{Client: rdb, Router: router, Source: "/orders"})
	require.NoError(t, err)
	const n = 20
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = outbox.Event{ID: int64(i + 1), EventType: "order.created", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), CreatedAt: time.Now()}
	}
	require.Nil(t, sink.Publish(ctx, events))
	require.Nil(t, sink.Publish(ctx, events))
	require.NoError(t, rdb.XGroupCreate(ctx, key, "billing", "0").Err())
	dead, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "billing", Consumer: "dead", Streams: []string{key, ">"}, Count: 5}).Result()
	require.NoError(t, err)
	require.Len(t, dead[0].Messages, 5)

	pool := testutil.Pool(t)
	schema := testutil.EmptySchemaName(t)
	_, err = outboxmigrate.MigrateInbox(ctx, outbox.Postgres(pool), outboxmigrate.Config{Schema: schema})
	require.NoError(t, err)
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	_, err = pool.Exec(ctx, `CREATE TABLE `+effects+` (event_id text NOT NULL)`)
	require.NoError(t, err)
	in, err := inbox.New(inbox.Config{Schema: schema, Consumer: "billing"})
	require.NoError(t, err)

	var failedOnce atomic.Bool
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 2 {
		client := redisClient(t)
		p := []*pgxpool.Pool{pool, testutil.NewPool(t, "redisinbox")}[i]
		wg.Go(func() {
			err := redisinbox.Consume(runCtx, redisinbox.Config{Client: client, Stream: key, Group: "billing", Name: fmt.Sprint("c", i),
				BatchSize: 4, Block: 100 * time.Millisecond, ClaimIdle: 200 * time.Millisecond, RetryDelay: 20 * time.Millisecond, Logger: quiet,
				Receive: func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
					return in.Handle(ctx, p, m, func(ctx context.Context, tx pgx.Tx) error {
						if m.ID == "7" && failedOnce.CompareAndSwap(false, true) {
							return errors.New("the payment service is down")
						}
						_, err := tx.Exec(ctx, `INSERT INTO `+effects+` (event_id) VALUES ($1)`, m.ID)
						return err
					})
				}})
			if err != nil {
				t.Error(err)
			}
		})
	}
	testutil.WaitFor(t, 30*time.Second, "every entry acknowledged", func() bool {
		groups, err := rdb.XInfoGroups(ctx, key).Result()
		require.NoError(t, err)
		return len(groups) == 1 && groups[0].Pending == 0 && groups[0].Lag == 0
	})
	stop()
	wg.Wait()
	require.True(t, failedOnce.Load())
	var count, distinct int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM `+effects).Scan(&count, &distinct))
	require.Equal(t, n, count, "one effect per event")
	require.Equal(t, n, distinct)
	var source string
	require.NoError(t, pool.QueryRow(ctx, `SELECT source FROM `+pgx.Identifier{schema, "inbox_messages"}.Sanitize()+` WHERE message_id = '1'`).Scan(&source))
	require.Equal(t, "/orders", source)
}

func TestMessageFromFields(t *testing.T) {
	t.Parallel()
	m, err := redisinbox.Message(map[string]any{"id": "3", "source": "/orders", "type": "order.created", "correlationid": "r-1", "data": `{"a":1}`}, "redis:k")
	require.NoError(t, err)
	require.Equal(t, "3", m.ID)
	require.Equal(t, "/orders", m.Source)
	require.Equal(t, "order.created", m.EventType)
	require.Equal(t, "r-1", m.Headers["correlationid"])
	require.JSONEq(t, `{"a":1}`, string(m.Payload))
	m, err = redisinbox.Message(map[string]any{"id": "3", "data": `{}`}, "redis:k")
	require.NoError(t, err)
	require.Equal(t, "redis:k", m.Source)
	_, err = redisinbox.Message(map[string]any{"data": `{}`}, "redis:k")
	require.Error(t, err)
	_, err = redisinbox.Message(map[string]any{"id": "1", "data": `nope`}, "redis:k")
	require.Error(t, err)
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg   redisinbox.Config
		field string
	}{
		{redisinbox.Config{}, "Client"},
		{redisinbox.Config{Client: redis.NewClient(&redis.Options{})}, "Stream"},
		{redisinbox.Config{Client: redis.NewClient(&redis.Options{}), Stream: "s"}, "Group"},
		{redisinbox.Config{Client: redis.NewClient(&redis.Options{}), Stream: "s", Group: "g"}, "Receive"},
	} {
		err := redisinbox.Consume(context.Background(), c.cfg)
		var ce *outbox.ConfigError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, c.field, ce.Field)
		if c.cfg.Client != nil {
			_ = c.cfg.Client.Close()
		}
	}
}
