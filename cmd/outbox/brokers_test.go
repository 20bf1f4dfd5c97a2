package main_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/route"
)

// The brokers the tests publish to: the local servers unless these
// variables name others (the same ones the sink packages' tests read).
// Kafka runs in the test process (kfake) unless OUTBOX_TEST_KAFKA_BROKERS
// names a real cluster that allows auto-creating topics.
func natsAddr() string { return envOr("OUTBOX_TEST_NATS_ADDR", "127.0.0.1:4222") }
func amqpURL() string  { return envOr("TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/") }
func redisURL() string { return envOr("TEST_REDIS_URL", "redis://127.0.0.1:6379/0") }
func mqttURL() string  { return envOr("TEST_MQTT_URL", "mqtt://127.0.0.1:1883") }

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// randomName is a short random lower-case name for a test's own stream,
// queue, topic or key.
func randomName() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// received is one event as a broker's consumer got it.
type received struct {
	id            int64  // the CloudEvents id the broker carried
	dedupID       string // the broker's own message ID, where it has one
	destination   string // subject, topic, routing key, stream key
	eventType     string
	correlationID string
	payload       json.RawMessage
}

// writeOrders commits n order.created events, each with a correlation ID,
// and returns their IDs.
func (b eventsBundle) writeOrders(t *testing.T, n int) []int64 {
	t.Helper()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: fmt.Sprint("o-", i+1),
			CorrelationID: fmt.Sprint("corr-", i+1), Payload: map[string]any{"n": i + 1, "note": "ünïcode & \"quotes\""}}
	}
	return b.write(t, msgs...)
}

// requireDelivered checks that got holds each event of ids exactly as
// stored: payload, type, correlation ID and the ID consumers dedupe on.
func (b eventsBundle) requireDelivered(t *testing.T, ids []int64, got []received) map[int64]received {
	t.Helper()
	byID := map[int64]received{}
	for _, r := range got {
		_, dup := byID[r.id]
		require.False(t, dup, "event %d received twice", r.id)
		byID[r.id] = r
	}
	require.Len(t, byID, len(ids))
	for _, id := range ids {
		r, ok := byID[id]
		require.True(t, ok, "event %d not received", id)
		e := b.event(t, id)
		require.JSONEq(t, string(e.Payload), string(r.payload), "event %d payload", id)
		require.Equal(t, e.EventType, r.eventType, "event %d type", id)
		require.Equal(t, e.Headers["correlation_id"], r.correlationID, "event %d correlation ID", id)
		if r.dedupID != "" {
			require.Equal(t, strconv.FormatInt(id, 10), r.dedupID, "event %d broker message ID", id)
		}
	}
	return byID
}

// relayUntilProcessed runs `outbox relay` with args against b's schema
// until every one of n events is processed, stops it with SIGTERM and
// returns its stderr. It fails when the relay exits early or logs secret.
func (b eventsBundle) relayUntilProcessed(t *testing.T, n int, secret string, args ...string) string {
	t.Helper()
	p := start(t, nil, append([]string{"--database-url", testutil.DatabaseURL(), "--schema", b.schema, "relay",
		"--poll-interval", "50ms", "--log-level", "debug"}, args...)...)
	testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("%d events processed", n), func() bool {
		require.False(t, p.exited(), "relay exited early; stderr:\n%s", p.stderr.String())
		return b.stats(t).Processed >= int64(n)
	})
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), "stderr:\n%s", p.stderr.String())
	s := b.stats(t)
	require.EqualValues(t, n, s.Processed)
	require.Zero(t, s.Processing+s.Failed)
	logs := p.stderr.String()
	require.Contains(t, logs, `msg="relay publishing to sink"`)
	if secret != "" {
		require.NotContains(t, logs, secret)
	}
	return logs
}

func TestRelayNATSRoutesAndDedupIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	js := natsStream(t)
	ids := b.writeOrders(t, 4)
	ids = append(ids, b.write(t,
		outbox.Message{EventType: "order.paid", AggregateType: "order", AggregateID: "p-1", CorrelationID: "c-paid", Payload: map[string]int{"paid": 1}},
		outbox.Message{EventType: "order.shipped", AggregateType: "order", AggregateID: "s-1", Payload: map[string]int{"shipped": 1},
			Headers: map[string]string{route.Header: js.prefix + ".custom"}},
	)...)

	logs := b.relayUntilProcessed(t, len(ids), "",
		"--sink", "nats://"+natsAddr()+"?stream="+js.stream,
		"--route", js.prefix+".{aggregate_type}.{event_type}",
		"--route-rule", "order.paid="+js.prefix+".paid.{aggregate_id}",
		"--route-rule", "*.paid=never.used")
	require.Contains(t, logs, "sink=nats://"+natsAddr()+"?…")

	got := js.messages(t)
	byID := b.requireDelivered(t, ids, got)
	for _, id := range ids[:4] {
		require.Equal(t, js.prefix+".order.order.created", byID[id].destination, "--route")
	}
	require.Equal(t, js.prefix+".paid.p-1", byID[ids[4]].destination, "the first matching --route-rule")
	require.Equal(t, js.prefix+".custom", byID[ids[5]].destination, "the outbox_topic header")
}

func TestRelayKafka(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "outbox-cli-" + randomName()
	brokers, query := kafkaCluster(t, topic)
	ids := b.writeOrders(t, 5)

	b.relayUntilProcessed(t, len(ids), "", "--sink", "kafka://"+strings.Join(brokers, ",")+query, "--route", topic)

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []received
	keys := map[int64]string{}
	for len(got) < len(ids) {
		fetches := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "consumed %d of %d records", len(got), len(ids))
		for _, fe := range fetches.Errors() {
			require.NoError(t, fe.Err)
		}
		for _, rec := range fetches.Records() {
			h := map[string]string{}
			for _, kv := range rec.Headers {
				h[kv.Key] = string(kv.Value)
			}
			id, err := strconv.ParseInt(h["ce_id"], 10, 64)
			require.NoError(t, err, "ce_id header")
			keys[id] = string(rec.Key)
			got = append(got, received{id: id, destination: rec.Topic, eventType: h["ce_type"],
				correlationID: h["ce_correlationid"], payload: rec.Value})
		}
	}
	b.requireDelivered(t, ids, got)
	for _, id := range ids {
		require.Equal(t, b.event(t, id).AggregateID, keys[id], "the record key is the aggregate ID")
	}
}

// rabbitExchange declares a topic exchange of the test's own (its name
// starts with prefix) and an exclusive queue to bind to it, on a channel
// to RabbitMQ at TEST_AMQP_URL; all go away when the test ends.
func rabbitExchange(t *testing.T, prefix string) (*amqp.Channel, string, amqp.Queue) {
	t.Helper()
	u, err := url.Parse(amqpURL())
	require.NoError(t, err)
	conn, err := amqp.Dial(u.String())
	require.NoError(t, err, "RabbitMQ is not reachable at TEST_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/): start it with rabbitmq-server -detached")
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	exchange := prefix + randomName()
	require.NoError(t, ch.ExchangeDeclare(exchange, "topic", false, true, false, false, nil))
	t.Cleanup(func() { _ = ch.ExchangeDelete(exchange, false, false) })
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)
	return ch, exchange, q
}

func TestRelayRabbitMQ(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ch, exchange, q := rabbitExchange(t, "outbox-cli-")
	u, err := url.Parse(amqpURL()) // the sink URL
	require.NoError(t, err)
	// The default route: {aggregate_type|events}.{event_type}.
	require.NoError(t, ch.QueueBind(q.Name, "order.order.*", exchange, false, nil))
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)
	ids := b.writeOrders(t, 5)

	q2 := u.Query()
	q2.Set("exchange", exchange)
	u.RawQuery = q2.Encode()
	pw, _ := u.User.Password()
	logs := b.relayUntilProcessed(t, len(ids), "", "--sink", u.String())
	require.NotContains(t, logs, ":"+pw+"@")

	var got []received
	timeout := time.After(30 * time.Second)
	for len(got) < len(ids) {
		select {
		case d := <-deliveries:
			id, err := strconv.ParseInt(fmt.Sprint(d.Headers["cloudEvents_id"]), 10, 64)
			require.NoError(t, err, "cloudEvents_id header")
			require.Equal(t, amqp.Persistent, d.DeliveryMode)
			got = append(got, received{id: id, dedupID: d.MessageId, destination: d.RoutingKey, eventType: d.Type,
				correlationID: d.CorrelationId, payload: d.Body})
		case <-timeout:
			t.Fatalf("received %d of %d messages", len(got), len(ids))
		}
	}
	for _, r := range b.requireDelivered(t, ids, got) {
		require.Equal(t, "order.order.created", r.destination)
	}
}

func TestRelayRedisStreams(t *testing.T) {
	t.Parallel()
	b := setup(t)
	opts, err := redis.ParseURL(redisURL())
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err(), "Redis is not reachable at TEST_REDIS_URL (default redis://127.0.0.1:6379/0): start redis-server")
	prefix := "outbox-cli-" + randomName()
	t.Cleanup(func() { _ = rdb.Del(context.Background(), prefix+":order.created").Err() })
	ids := b.writeOrders(t, 5)

	b.relayUntilProcessed(t, len(ids), "", "--sink", redisURL()+"?maxlen=1000", "--route", prefix+":{event_type}", "--source", "/cli-redis")

	entries, err := rdb.XRange(ctx, prefix+":order.created", "-", "+").Result()
	require.NoError(t, err)
	var got []received
	for _, e := range entries {
		id, err := strconv.ParseInt(fmt.Sprint(e.Values["id"]), 10, 64)
		require.NoError(t, err, "id field")
		require.Equal(t, "/cli-redis", e.Values["source"], "--source")
		got = append(got, received{id: id, destination: prefix + ":order.created", eventType: fmt.Sprint(e.Values["type"]),
			correlationID: fmt.Sprint(e.Values["correlationid"]), payload: json.RawMessage(fmt.Sprint(e.Values["data"]))})
	}
	b.requireDelivered(t, ids, got)
}

func TestRelayMQTT(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prefix := "outbox-cli-" + randomName()
	var (
		mu  sync.Mutex
		got []received
		bad []string
	)
	opts := mqtt.NewClientOptions().AddBroker(strings.Replace(mqttURL(), "mqtt://", "tcp://", 1)).
		SetClientID("cli-test-sub-" + randomName()).SetCleanSession(true).SetAutoReconnect(false)
	sub := mqtt.NewClient(opts)
	tok := sub.Connect()
	require.True(t, tok.WaitTimeout(10*time.Second), "MQTT connect timed out")
	require.NoError(t, tok.Error(), "the MQTT broker is not reachable at TEST_MQTT_URL (default mqtt://127.0.0.1:1883)")
	t.Cleanup(func() { sub.Disconnect(250) })
	tok = sub.Subscribe(prefix+"/#", 1, func(_ mqtt.Client, m mqtt.Message) {
		var ce struct {
			ID            string          `json:"id"`
			Type          string          `json:"type"`
			CorrelationID string          `json:"correlationid"`
			Data          json.RawMessage `json:"data"`
		}
		mu.Lock()
		defer mu.Unlock()
		if err := json.Unmarshal(m.Payload(), &ce); err != nil {
			bad = append(bad, string(m.Payload()))
			return
		}
		id, err := strconv.ParseInt(ce.ID, 10, 64)
		if err != nil {
			bad = append(bad, ce.ID)
			return
		}
		got = append(got, received{id: id, destination: m.Topic(), eventType: ce.Type, correlationID: ce.CorrelationID, payload: ce.Data})
	})
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	ids := b.writeOrders(t, 5)

	const password = "MqttPassw0rdNotUsed"
	sinkURL := strings.Replace(mqttURL(), "://", "://relay:"+password+"@", 1) + "?client_id=cli-relay-" + randomName()
	if strings.Contains(mqttURL(), "@") {
		sinkURL = mqttURL() + "?client_id=cli-relay-" + randomName()
	}
	b.relayUntilProcessed(t, len(ids), password, "--sink", sinkURL, "--route", prefix+"/{aggregate_type}/{event_type}")

	testutil.WaitFor(t, 30*time.Second, "every message received", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= len(ids)
	})
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, bad)
	for _, r := range b.requireDelivered(t, ids, got) {
		require.Equal(t, prefix+"/order/order.created", r.destination)
	}
}

// jsStream is a JetStream stream of a test's own, storing prefix.>.
type jsStream struct {
	js     jetstream.JetStream
	stream string
	prefix string
}

// natsStream creates a memory stream with a one-minute duplicate window,
// deleted when t ends.
func natsStream(t *testing.T) *jsStream {
	t.Helper()
	nc, err := nats.Connect("nats://"+natsAddr(), nats.Name("outbox-cli-test"))
	require.NoError(t, err, "NATS with JetStream is not reachable at %s (set OUTBOX_TEST_NATS_ADDR): start it with nats-server -js", natsAddr())
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	id := randomName()
	s := &jsStream{js: js, stream: "OUTBOX_CLI_" + strings.ToUpper(id), prefix: "cli" + id}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: s.stream, Subjects: []string{s.prefix + ".>"},
		Storage: jetstream.MemoryStorage, Duplicates: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, s.stream); err != nil {
			t.Errorf("delete stream %s: %v", s.stream, err)
		}
	})
	return s
}

// count is how many messages the stream holds.
func (s *jsStream) count(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, s.stream)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	return info.State.Msgs
}

// messages reads every message of the stream.
func (s *jsStream) messages(t *testing.T) []received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, s.stream)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	var out []received
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		require.NoError(t, err)
		id, err := strconv.ParseInt(m.Header.Get("ce-id"), 10, 64)
		require.NoError(t, err, "ce-id header")
		out = append(out, received{id: id, dedupID: m.Header.Get(jetstream.MsgIDHeader), destination: m.Subject,
			eventType: m.Header.Get("ce-type"), correlationID: m.Header.Get("ce-correlationid"), payload: m.Data})
	}
	return out
}

// kafkaCluster returns the seed brokers of a kfake cluster of the test's
// own that holds topic, and the sink URL query the relay needs: none for
// kfake; for the real cluster OUTBOX_TEST_KAFKA_BROKERS names, one that
// lets the relay's first produce create topic (the cluster must allow it).
func kafkaCluster(t *testing.T, topic string) ([]string, string) {
	t.Helper()
	if env := os.Getenv("OUTBOX_TEST_KAFKA_BROKERS"); env != "" {
		return strings.Split(env, ","), "?auto_create_topics=true"
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c.ListenAddrs(), ""
}

// outbox receive --from kafka:// --metrics-addr serves the group's lag:
// 0 with the ok gauge at 1 once every produced record is stored and its
// offset committed.
func TestReceiveFromKafkaServesBrokerPending(t *testing.T) {
	t.Parallel()
	inboxS := inboxSchema(t)
	topic := "outbox-cli-pending-" + randomName()
	brokers, query := kafkaCluster(t, topic)
	ctx := context.Background()
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	for i := range 5 {
		r := &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf(`{"n":%d}`, i)),
			Headers: []kgo.RecordHeader{{Key: "ce_id", Value: []byte(fmt.Sprint(i + 1))}, {Key: "ce_source", Value: []byte("/orders")}}}
		require.NoError(t, prod.ProduceSync(ctx, r).FirstErr())
	}
	prod.Close()
	sep := "?"
	if query != "" {
		sep = "&"
	}
	receiver := start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", inboxS, "--log-format", "json",
		"receive", "--from", "kafka://"+strings.Join(brokers, ",")+query+sep+"topic="+topic, "--consumer", "billing", "--metrics-addr", "127.0.0.1:0")
	metrics := "http://" + obsLogValue(t, receiver, "serving metrics", "addr") + "/metrics"
	testutil.WaitFor(t, 60*time.Second, "every record stored and the group's lag at 0", func() bool {
		require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
		_, m := obsGet(t, metrics)
		return inboxCount(t, inboxS, "") == 5 &&
			strings.Contains(m, `outbox_consumer_broker_pending{broker="kafka",consumer="billing"} 0`) &&
			strings.Contains(m, `outbox_consumer_broker_pending_ok{broker="kafka",consumer="billing"} 1`)
	})
	// The same count recorded in the database, for outbox stats.
	testutil.WaitFor(t, 30*time.Second, "the group's lag at 0 in outbox stats", func() bool {
		c := brokerReport(t, inboxS, "billing")
		return c != nil && c["broker"] == "kafka" && c["broker_pending"] == float64(0) && c["broker_pending_stale"] == false
	})
	require.Equal(t, 0, receiver.stop(t, syscall.SIGTERM))
}
