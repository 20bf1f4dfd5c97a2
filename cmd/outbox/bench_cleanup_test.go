package main_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxkit/outbox/internal/testutil"
)

// benchSink runs outbox bench's sink scenario (no database work) with 50
// events through sinkURL, plus args.
func benchSink(t *testing.T, sinkURL string, args ...string) result {
	t.Helper()
	return run(t, nil, append([]string{"--database-url", testutil.DatabaseURL(), "bench", "--events", "50", "--batch-size", "10",
		"--schema-prefix", benchPrefix(t), "--sink", sinkURL, "sink"}, args...)...)
}

// TestBenchRemovesNATSStreamItCreated: a stream the --sink URL's
// create_stream made is deleted after the bench, unless --keep; a stream
// that existed before stays.
func TestBenchRemovesNATSStreamItCreated(t *testing.T) {
	t.Parallel()
	nc, err := nats.Connect("nats://"+natsAddr(), nats.Name("outbox-cli-test"))
	require.NoError(t, err, "NATS with JetStream is not reachable at %s (set OUTBOX_TEST_NATS_ADDR): start it with nats-server -js", natsAddr())
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	exists := func(name string) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return false
		}
		require.NoError(t, err)
		return true
	}
	for _, tc := range []struct {
		name     string
		before   bool // the stream exists before the bench
		keep     bool
		wantLeft bool
	}{
		{"Created", false, false, false},
		{"CreatedKept", false, true, true},
		{"Existing", true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id := randomName()
			stream, prefix := "OUTBOX_BENCHCLEAN_"+strings.ToUpper(id), "benchclean"+id
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = js.DeleteStream(ctx, stream)
			})
			if tc.before {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage})
				require.NoError(t, err)
			}
			sinkURL := "nats://" + natsAddr() + "?stream=" + stream + "&create_stream=true&stream_subjects=" + prefix + ".>&route=" + prefix + ".{event_type}"
			var args []string
			if tc.keep {
				args = append(args, "--keep")
			}
			res := benchSink(t, sinkURL, args...)
			// Not requireBenchOK: the sink logs the stream it created.
			require.Equal(t, 0, res.code, "exit code; stderr:\n%s", res.stderr)
			require.Equal(t, tc.wantLeft, exists(stream), "stream left; stderr:\n%s", res.stderr)
			if tc.wantLeft {
				require.NotContains(t, res.stderr, "removed")
			} else {
				require.Contains(t, res.stderr, "outbox bench: removed what the bench created: NATS stream "+stream+" (--keep leaves it)")
			}
		})
	}
}

// TestBenchRemovesRedisKeysItCreated: the stream keys the bench's events
// went to are deleted when they did not exist before; a key that did keeps
// its entries.
func TestBenchRemovesRedisKeysItCreated(t *testing.T) {
	t.Parallel()
	opts, err := redis.ParseURL(redisURL())
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err(), "Redis is not reachable at TEST_REDIS_URL (default redis://127.0.0.1:6379/0): start redis-server")

	prefix := "outbox-benchclean-" + randomName()
	existing, created := prefix+":existing", prefix+":order.created"
	t.Cleanup(func() { _ = rdb.Del(context.Background(), existing, created).Err() })
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: existing, Values: []string{"mine", "1"}}).Err())

	res := benchSink(t, redisURL()+"?route="+url.QueryEscape(prefix+":{event_type}"))
	requireBenchOK(t, res)
	n, err := rdb.Exists(ctx, created).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the key the bench created is gone; stderr:\n%s", res.stderr)
	require.Contains(t, res.stderr, "outbox bench: removed what the bench created: Redis stream "+created)

	res = benchSink(t, redisURL()+"?route="+url.QueryEscape(existing))
	requireBenchOK(t, res)
	l, err := rdb.XLen(ctx, existing).Result()
	require.NoError(t, err)
	require.EqualValues(t, 51, l, "the existing key stays, with its entry and the bench's")
	require.NotContains(t, res.stderr, "removed")

	res = benchSink(t, redisURL()+"?route="+url.QueryEscape(prefix+":{event_type}"), "--keep")
	requireBenchOK(t, res)
	l, err = rdb.XLen(ctx, created).Result()
	require.NoError(t, err)
	require.EqualValues(t, 50, l, "--keep leaves the key")
}

// TestBenchRemovesRabbitMQExchangeItDeclared: the exchange the --sink
// URL's declare_exchange made is deleted after the bench, also when the
// bench fails (no queue is bound to a new exchange, so every message is
// unroutable); an exchange that existed stays.
func TestBenchRemovesRabbitMQExchangeItDeclared(t *testing.T) {
	t.Parallel()
	conn, err := amqp.Dial(amqpURL())
	require.NoError(t, err, "RabbitMQ is not reachable at TEST_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/): start it with rabbitmq-server -detached")
	t.Cleanup(func() { _ = conn.Close() })
	exists := func(name string) bool {
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer func() { _ = ch.Close() }()
		err = ch.ExchangeDeclarePassive(name, "topic", true, false, false, false, nil)
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return false
		}
		require.NoError(t, err)
		return true
	}
	sinkURL := func(exchange string) string {
		u, err := url.Parse(amqpURL())
		require.NoError(t, err)
		q := u.Query()
		q.Set("exchange", exchange)
		q.Set("declare_exchange", "true")
		q.Set("unroutable", "permanent")
		u.RawQuery = q.Encode()
		return u.String()
	}

	created := "outbox-benchclean-" + randomName()
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(created, false, false)
			_ = ch.Close()
		}
	})
	res := benchSink(t, sinkURL(created))
	require.NotEqual(t, 0, res.code, "no queue is bound: the bench fails")
	require.False(t, exists(created), "the exchange the bench declared is gone; stderr:\n%s", res.stderr)
	require.Contains(t, res.stderr, "outbox bench: removed what the bench created: RabbitMQ exchange "+created)

	// An existing exchange with a queue bound: the bench succeeds, and
	// the exchange stays.
	ch, err := conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	existing := "outbox-benchclean-" + randomName()
	require.NoError(t, ch.ExchangeDeclare(existing, "topic", true, false, false, false, nil))
	t.Cleanup(func() { _ = ch.ExchangeDelete(existing, false, false) })
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, "#", existing, false, nil))
	res = benchSink(t, sinkURL(existing))
	requireBenchOK(t, res)
	require.True(t, exists(existing))
	require.NotContains(t, res.stderr, "removed")
}

// TestBenchRemovesKafkaTopicsItCreated: with auto_create_topics, the topics
// the bench's produces created are deleted after the bench; a topic that
// existed stays.
func TestBenchRemovesKafkaTopicsItCreated(t *testing.T) {
	t.Parallel()
	existing := "benchclean-existing-" + randomName()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.SeedTopics(1, existing))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	brokers := strings.Join(c.ListenAddrs(), ",")
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	exists := func(topic string) bool {
		req := kmsg.NewPtrMetadataRequest()
		req.AllowAutoTopicCreation = false
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, admin)
		require.NoError(t, err)
		require.Len(t, resp.Topics, 1)
		return resp.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code
	}

	prefix := "benchclean-" + randomName()
	created := prefix + ".order.created"
	res := benchSink(t, "kafka://"+brokers+"?auto_create_topics=true&route="+url.QueryEscape(prefix+".{event_type}"))
	require.Equal(t, 0, res.code, "exit code; stderr:\n%s", res.stderr)
	require.Contains(t, res.stderr, "outbox bench: removed what the bench created: Kafka topic "+created)
	require.False(t, exists(created), "the topic the bench created is gone")

	res = benchSink(t, "kafka://"+brokers+"?auto_create_topics=true&route="+existing)
	require.Equal(t, 0, res.code, "exit code; stderr:\n%s", res.stderr)
	require.NotContains(t, res.stderr, "removed")
	require.True(t, exists(existing))

	res = benchSink(t, "kafka://"+brokers+"?auto_create_topics=true&route="+url.QueryEscape(prefix+".{event_type}"), "--keep")
	require.Equal(t, 0, res.code, "exit code; stderr:\n%s", res.stderr)
	require.True(t, exists(created), "--keep leaves the topic")
}
