package main_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
)

const receiveSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// inboxSchema is a schema of the test's own with the inbox migrated by the
// binary.
func inboxSchema(t *testing.T) string {
	t.Helper()
	schema := testutil.EmptySchemaName(t)
	res := outboxCmd(t, schema, "migrate", "--inbox")
	requireOK(t, res)
	require.Contains(t, res.stdout, "applied inbox migration 001_create_inbox_messages")
	require.Contains(t, res.stdout, "applied inbox migration 002_create_inbox_consumers")
	require.Equal(t, "inbox is up to date at version 2\n", outboxCmd(t, schema, "migrate", "--inbox").stdout)
	return schema
}

func inboxCount(t *testing.T, schema, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, testutil.Pool(t).QueryRow(context.Background(),
		`SELECT count(*) FROM `+pgx.Identifier{schema, "inbox_messages"}.Sanitize()+` `+where, args...).Scan(&n))
	return n
}

// startReceiver starts outbox receive and returns it with its URL.
func startReceiver(t *testing.T, dbURL, schema, addr string, extra ...string) (*process, string) {
	t.Helper()
	args := append([]string{"--database-url", dbURL, "--schema", schema, "--log-format", "json",
		"receive", "--addr", addr, "--webhook-secret", receiveSecret}, extra...)
	p := start(t, nil, args...)
	return p, obsLogValue(t, p, "receiving webhooks", "url")
}

// signedRequest is a request as the webhook sink sends it, signed at ts.
func signedRequest(t *testing.T, target, id string, ts time.Time, body []byte) *http.Request {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(receiveSecret, "whsec_"))
	require.NoError(t, err)
	unix := strconv.FormatInt(ts.Unix(), 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + unix + "."))
	mac.Write(body)
	req, err := http.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", unix)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	req.Header.Set("ce-id", id)
	req.Header.Set("ce-source", "/cli-test")
	req.Header.Set("ce-type", "order.created")
	return req
}

func send(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func TestReceiveStoresEachMessageOnce(t *testing.T) {
	t.Parallel()
	schema := inboxSchema(t)
	p, base := startReceiver(t, testutil.DatabaseURL(), schema, "127.0.0.1:0", "--consumer", "billing",
		"--metrics-addr", "127.0.0.1:0", "--max-body-bytes", "4096")
	metricsAddr := obsLogValue(t, p, "serving metrics", "addr")
	body := []byte(`{"order_id":"o-1"}`)

	// The same message five times: stored once, every answer 200.
	for i := range 5 {
		code, text := send(t, signedRequest(t, base+"hooks/orders", "41", time.Now(), body))
		require.Equal(t, http.StatusOK, code, text)
		require.Contains(t, text, map[bool]string{true: "stored", false: "duplicate"}[i == 0])
	}
	require.Equal(t, 1, inboxCount(t, schema, `WHERE consumer = 'billing' AND source = '/cli-test' AND message_id = '41' AND processed_at IS NULL AND payload->>'order_id' = 'o-1' AND event_type = 'order.created'`))

	// Refused requests store nothing.
	bad := signedRequest(t, base, "42", time.Now(), body)
	bad.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString([]byte("not the signature, 32 bytes long")))
	code, text := send(t, bad)
	require.Equal(t, http.StatusUnauthorized, code, text)
	unsigned := signedRequest(t, base, "42", time.Now(), body)
	unsigned.Header.Del("webhook-signature")
	code, _ = send(t, unsigned)
	require.Equal(t, http.StatusUnauthorized, code)
	code, text = send(t, signedRequest(t, base, "42", time.Now().Add(-10*time.Minute), body))
	require.Equal(t, http.StatusUnauthorized, code, "a replayed old request")
	require.Contains(t, text, "tolerance")
	big := append(append([]byte(`{"pad":"`), bytes.Repeat([]byte("x"), 5000)...), '"', '}')
	code, _ = send(t, signedRequest(t, base, "42", time.Now(), big))
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	require.Zero(t, inboxCount(t, schema, `WHERE message_id = '42'`))

	// Metrics count what was received.
	testutil.WaitFor(t, 10*time.Second, "inbox metrics", func() bool {
		_, m := obsGet(t, "http://"+metricsAddr+"/metrics")
		return obsHasSeries(m, `outbox_inbox_received_total{consumer="billing",schema="`+schema+`"}`, "1") &&
			obsHasSeries(m, `outbox_inbox_duplicates_total{consumer="billing",schema="`+schema+`"}`, "4") &&
			obsHasSeries(m, `outbox_inbox_unprocessed{consumer="billing",schema="`+schema+`"}`, "1")
	})
	code, _ = obsGet(t, "http://"+metricsAddr+"/readyz")
	require.Equal(t, http.StatusOK, code)

	require.Equal(t, 0, p.stop(t, syscall.SIGTERM))
	require.Contains(t, p.stderr.String(), "receiver stopped")
	require.NotContains(t, p.stderr.String(), strings.TrimPrefix(receiveSecret, "whsec_"))
}

// Two receiver processes get the same messages at the same time, each
// message five times in all: each is stored once, and exactly one answer
// per message says "stored".
func TestReceiveTwoProcessesStoreOnce(t *testing.T) {
	t.Parallel()
	schema := inboxSchema(t)
	_, a := startReceiver(t, testutil.DatabaseURL(), schema, "127.0.0.1:0")
	_, b := startReceiver(t, testutil.DatabaseURL(), schema, "127.0.0.1:0")
	const messages, deliveries = 30, 5
	var (
		wg     sync.WaitGroup
		stored atomic.Int64
	)
	for d := range deliveries {
		target := []string{a, b}[d%2]
		wg.Go(func() {
			for n := range messages {
				req := signedRequest(t, target, fmt.Sprint(n), time.Now(), []byte(`{}`))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				text, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("message %d: %d %s", n, resp.StatusCode, text)
				}
				if strings.Contains(string(text), `"stored"`) {
					stored.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(messages), stored.Load())
	require.Equal(t, messages, inboxCount(t, schema, ""))
}

// The database goes away: requests get 503 and store nothing; once it is
// back the sender's retry is stored.
func TestReceiveDatabaseOutage(t *testing.T) {
	t.Parallel()
	schema := inboxSchema(t)
	u, err := url.Parse(testutil.DatabaseURL())
	require.NoError(t, err)
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr()
	p, base := startReceiver(t, u.String(), schema, "127.0.0.1:0")
	code, _ := send(t, signedRequest(t, base, "1", time.Now(), []byte(`{}`)))
	require.Equal(t, http.StatusOK, code)

	proxy.Refuse()
	proxy.Cut()
	code, text := send(t, signedRequest(t, base, "2", time.Now(), []byte(`{}`)))
	require.Equal(t, http.StatusServiceUnavailable, code, text)
	require.Equal(t, 1, inboxCount(t, schema, ""), "nothing stored during the outage")
	require.False(t, p.exited(), "the receiver outlives the outage")

	proxy.Allow()
	testutil.WaitFor(t, 20*time.Second, "the retry to be stored", func() bool {
		code, _ := send(t, signedRequest(t, base, "2", time.Now(), []byte(`{}`)))
		return code == http.StatusOK
	})
	require.Equal(t, 2, inboxCount(t, schema, ""))
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM))
}

func TestReceiveUsageErrors(t *testing.T) {
	t.Parallel()
	schema := testutil.EmptySchemaName(t)
	requireFail(t, outboxCmd(t, schema, "receive", "--addr", ":0"), 2, "refusing to receive unsigned webhooks on every interface", "--webhook-secret")
	requireFail(t, outboxCmd(t, schema, "receive", "--addr", "nope"), 2, "invalid --addr")
	requireFail(t, outboxCmd(t, schema, "receive", "--webhook-secret", "whsec_!!!"), 2, "invalid --webhook-secret")
	requireFail(t, outboxCmd(t, schema, "receive", "--tls-cert", "x.pem"), 2, "--tls-cert and --tls-key go together")
	requireFail(t, outboxCmd(t, schema, "receive", "--addr", "127.0.0.1:0"), 1, "inbox_messages", "run outbox migrate --inbox --schema "+schema)
	requireFail(t, outboxCmd(t, schema, "inbox", "purge"), 2, "missing --older-than")
	requireFail(t, outboxCmd(t, schema, "migrate", "--inbox", "--partition-archive", "daily"), 2, "the inbox has no archive")
}

func TestInboxPurgeCommand(t *testing.T) {
	t.Parallel()
	schema := inboxSchema(t)
	ctx := context.Background()
	tbl := pgx.Identifier{schema, "inbox_messages"}.Sanitize()
	_, err := testutil.Pool(t).Exec(ctx, `INSERT INTO `+tbl+` (consumer, message_id, payload, received_at, processed_at) VALUES
  ('a', '1', '{}', now() - interval '20 days', now() - interval '20 days'),
  ('b', '2', '{}', now() - interval '20 days', now() - interval '20 days'),
  ('a', '3', '{}', now() - interval '20 days', NULL),
  ('a', '4', '{}', now(), now())`)
	require.NoError(t, err)
	res := outboxCmd(t, schema, "inbox", "purge", "--older-than", "14d", "--consumer", "a")
	requireOK(t, res)
	require.Equal(t, "purged 1 inbox messages of consumer a processed more than 14d ago\n", res.stdout)
	res = outboxCmd(t, schema, "inbox", "purge", "--older-than", "14d")
	requireOK(t, res)
	require.Equal(t, "purged 1 inbox messages of every consumer processed more than 14d ago\n", res.stdout)
	require.Equal(t, 2, inboxCount(t, schema, ""))
}

// freeAddr returns a loopback address nothing listens on, for a receiver
// that must come back on the same address after a kill.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// Writer → outbox → relay → webhook sink → outbox receive → inbox, with the
// relay and the receiver SIGKILLed during the run: the inbox ends with
// exactly one row per committed event and none for rolled-back ones.
func TestReceiveEndToEndWithKills(t *testing.T) {
	t.Parallel()
	t.Run("one event per request", func(t *testing.T) {
		t.Parallel()
		receiveEndToEndWithKills(t)
	})
	// The receiver stores a batch's events all or none, in one round trip.
	t.Run("batches", func(t *testing.T) {
		t.Parallel()
		receiveEndToEndWithKills(t, "--webhook-batch", "5")
	})
}

func receiveEndToEndWithKills(t *testing.T, relayExtra ...string) {
	b := setup(t)
	inbox := inboxSchema(t)
	addr := freeAddr(t)
	db := testutil.DatabaseURL()
	relayArgs := []string{"--database-url", db, "--schema", b.schema, "--log-level", "warn", "relay",
		"--sink", "http://" + addr + "/outbox", "--webhook-secret", receiveSecret, "--source", "/e2e",
		"--batch-size", "10", "--poll-interval", "50ms", "--lease", "3s", "--probe-interval", "100ms", "--sink-timeout", "2s"}
	relayArgs = append(relayArgs, relayExtra...)
	receiverArgs := []string{"--database-url", db, "--schema", inbox, "--log-format", "json",
		"receive", "--addr", addr, "--webhook-secret", receiveSecret, "--consumer", "e2e"}

	// The writer commits batches of 10 and rolls back every fourth, while
	// the rest runs.
	var (
		committed  sync.Map // event ID → true
		rolledBack atomic.Int64
		writing    sync.WaitGroup
	)
	writer := outbox.NewWriter(outbox.WriterConfig{Schema: b.schema})
	writing.Go(func() {
		for batch := range 24 {
			tx, err := b.pool.Begin(b.ctx)
			if err != nil {
				t.Error(err)
				return
			}
			msgs := make([]outbox.Message, 10)
			for i := range msgs {
				msgs[i] = outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: fmt.Sprint(batch), Payload: map[string]int{"n": i}}
			}
			res, err := writer.Write(b.ctx, tx, msgs...)
			if err != nil {
				t.Error(err)
				_ = tx.Rollback(b.ctx)
				return
			}
			if batch%4 == 3 {
				require.NoError(t, tx.Rollback(b.ctx))
				rolledBack.Add(int64(len(res.IDs)))
			} else {
				require.NoError(t, tx.Commit(b.ctx))
				for _, id := range res.IDs {
					committed.Store(strconv.FormatInt(id, 10), true)
				}
			}
			time.Sleep(30 * time.Millisecond) // pace the writer over the kills, not a wait for async work
		}
	})

	relay := start(t, nil, relayArgs...)
	receiver := start(t, nil, receiverArgs...)
	obsLogValue(t, receiver, "receiving webhooks", "url")
	for round := range 3 {
		// Let some messages through, then kill both at once.
		seen := inboxCount(t, inbox, "")
		testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("round %d: more messages received", round), func() bool {
			require.False(t, relay.exited(), "relay exited; stderr:\n%s", relay.stderr.String())
			require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
			return inboxCount(t, inbox, "") > seen
		})
		require.NoError(t, relay.cmd.Process.Signal(syscall.SIGKILL))
		require.NoError(t, receiver.cmd.Process.Signal(syscall.SIGKILL))
		<-relay.done
		<-receiver.done
		relay = start(t, nil, relayArgs...)
		receiver = start(t, nil, receiverArgs...)
		obsLogValue(t, receiver, "receiving webhooks", "url")
	}
	writing.Wait()
	n := 0
	committed.Range(func(any, any) bool { n++; return true })
	require.Equal(t, 180, n)
	require.EqualValues(t, 60, rolledBack.Load())
	testutil.WaitFor(t, 60*time.Second, "every committed event delivered", func() bool {
		require.False(t, relay.exited(), "relay exited; stderr:\n%s", relay.stderr.String())
		require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
		s := b.stats(t)
		return s.Processed == int64(n) && s.Pending == 0 && s.Processing == 0
	})
	rows, err := testutil.Pool(t).Query(b.ctx, `SELECT message_id, source, consumer FROM `+pgx.Identifier{inbox, "inbox_messages"}.Sanitize())
	require.NoError(t, err)
	got := map[string]int{}
	for rows.Next() {
		var id, source, consumer string
		require.NoError(t, rows.Scan(&id, &source, &consumer))
		require.Equal(t, "/e2e", source)
		require.Equal(t, "e2e", consumer)
		got[id]++
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, n, "one row per committed event")
	for id, c := range got {
		require.Equal(t, 1, c)
		_, ok := committed.Load(id)
		require.True(t, ok, "message %s is not a committed event (a rolled-back one?)", id)
	}
	require.Equal(t, 0, relay.stop(t, syscall.SIGTERM))
	require.Equal(t, 0, receiver.stop(t, syscall.SIGTERM))
}

// outbox stats shows the inbox's backlog when the schema holds one.
func TestStatsShowsConsumerLag(t *testing.T) {
	t.Parallel()
	b := setup(t)
	requireOK(t, outboxCmd(t, b.schema, "migrate", "--inbox"))
	type consumer struct {
		Consumer    string  `json:"consumer"`
		Unprocessed int64   `json:"unprocessed"`
		Age         float64 `json:"oldest_unprocessed_age_seconds"`
	}
	consumers := func(schema string) *[]consumer {
		res := outboxCmd(t, schema, "stats", "--json")
		requireOK(t, res)
		var doc struct {
			Consumers *[]consumer `json:"consumers"`
		}
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
		return doc.Consumers
	}
	require.Equal(t, &[]consumer{}, consumers(b.schema))
	_, err := b.pool.Exec(b.ctx, `INSERT INTO `+pgx.Identifier{b.schema, "inbox_messages"}.Sanitize()+
		` (consumer, message_id, payload, received_at) VALUES ('billing', '1', '{}', now() - interval '90 seconds'), ('billing', '2', '{}', now())`)
	require.NoError(t, err)
	got := *consumers(b.schema)
	require.Len(t, got, 1)
	require.Equal(t, "billing", got[0].Consumer)
	require.Equal(t, int64(2), got[0].Unprocessed)
	require.InDelta(t, 90, got[0].Age, 20)
	res := outboxCmd(t, b.schema, "stats")
	requireOK(t, res)
	require.Contains(t, res.stdout, "inbox consumers with unprocessed messages or a broker report: 1")
	require.Regexp(t, `billing\s+2\s+1m3\d`, res.stdout)

	// Without an inbox there is no consumers key.
	require.Nil(t, consumers(setup(t).schema))
}

// outbox stats on a consumer's database, with the inbox and no outbox
// table, reports the consumers and says the outbox is absent; with
// neither it fails as before.
func TestStatsInboxOnly(t *testing.T) {
	t.Parallel()
	schema := inboxSchema(t)
	_, err := testutil.Pool(t).Exec(context.Background(), `INSERT INTO `+pgx.Identifier{schema, "inbox_messages"}.Sanitize()+
		` (consumer, message_id, payload, received_at) VALUES ('billing', '1', '{}', now() - interval '90 seconds')`)
	require.NoError(t, err)

	res := outboxCmd(t, schema, "stats", "--json")
	requireOK(t, res)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	require.Equal(t, true, doc["outbox_absent"])
	consumers, ok := doc["consumers"].([]any)
	require.True(t, ok, "consumers: %s", res.stdout)
	require.Len(t, consumers, 1)
	c := consumers[0].(map[string]any)
	require.Equal(t, "billing", c["consumer"])
	require.Equal(t, 1.0, c["unprocessed"])
	require.InDelta(t, 90, c["oldest_unprocessed_age_seconds"], 20)

	res = outboxCmd(t, schema, "stats")
	requireOK(t, res)
	require.Contains(t, res.stdout, "outbox: absent")
	require.Contains(t, res.stdout, "inbox consumers with unprocessed messages or a broker report: 1")
	require.Regexp(t, `billing\s+1\s+1m3\d`, res.stdout)

	// --watch needs the outbox table, and neither table is an error.
	requireFail(t, outboxCmd(t, schema, "stats", "--watch"), 1, "run outbox migrate")
	requireFail(t, outboxCmd(t, testutil.EmptySchemaName(t), "stats"), 1, "run outbox migrate")
}

// Writer → outbox → relay → NATS JetStream → outbox receive --from nats://
// → inbox, with the relay and the receiver SIGKILLed during the run: one
// inbox row per committed event, and the durable consumer ends with
// nothing pending or unacknowledged.
func TestReceiveFromNATSWithKills(t *testing.T) {
	t.Parallel()
	b := setup(t)
	inboxS := inboxSchema(t)
	js := natsStream(t)
	db := testutil.DatabaseURL()
	relayArgs := []string{"--database-url", db, "--schema", b.schema, "--log-level", "warn", "relay",
		"--sink", "nats://" + natsAddr() + "?stream=" + js.stream, "--route", js.prefix + ".{event_type}",
		"--batch-size", "10", "--poll-interval", "50ms", "--lease", "3s", "--sink-timeout", "2s"}
	receiverArgs := []string{"--database-url", db, "--schema", inboxS, "--log-format", "json",
		"receive", "--from", "nats://" + natsAddr() + "?stream=" + js.stream, "--consumer", "billing"}

	ids := b.writeN(t, 60)
	relay := start(t, nil, relayArgs...)
	receiver := start(t, nil, receiverArgs...)
	obsLogValue(t, receiver, "receiving from NATS JetStream", "stream")
	for round := range 2 {
		seen := inboxCount(t, inboxS, "")
		testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("round %d: more messages received", round), func() bool {
			require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
			return inboxCount(t, inboxS, "") > seen
		})
		require.NoError(t, relay.cmd.Process.Signal(syscall.SIGKILL))
		require.NoError(t, receiver.cmd.Process.Signal(syscall.SIGKILL))
		<-relay.done
		<-receiver.done
		ids = append(ids, b.writeN(t, 30)...)
		relay = start(t, nil, relayArgs...)
		receiver = start(t, nil, receiverArgs...)
		obsLogValue(t, receiver, "receiving from NATS JetStream", "stream")
	}
	testutil.WaitFor(t, 60*time.Second, "every event in the inbox", func() bool {
		require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
		return inboxCount(t, inboxS, "") == len(ids)
	})
	for _, id := range ids {
		require.Equal(t, 1, inboxCount(t, inboxS, `WHERE consumer = 'billing' AND source = '/outbox' AND message_id = $1`, strconv.FormatInt(id, 10)), "event %d", id)
	}
	ctx := context.Background()
	cons, err := js.js.Consumer(ctx, js.stream, "billing")
	require.NoError(t, err)
	testutil.WaitFor(t, 30*time.Second, "every message acknowledged", func() bool {
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		return info.NumPending == 0 && info.NumAckPending == 0
	})
	require.Equal(t, 0, relay.stop(t, syscall.SIGTERM))
	require.Equal(t, 0, receiver.stop(t, syscall.SIGTERM))
	require.Contains(t, receiver.stderr.String(), "receiver stopped")

	requireFail(t, outboxCmd(t, inboxS, "receive", "--from", "ftp://127.0.0.1:21"), 2, "ftp:// is not supported")
	requireFail(t, outboxCmd(t, inboxS, "receive", "--from", "nats://"+natsAddr()), 2, "names no stream")
	requireFail(t, outboxCmd(t, inboxS, "receive", "--from", "nats://"+natsAddr()+"?stream=S", "--addr", ":1"), 2, "--addr is for webhooks")
}

// Writer → outbox → relay → Redis stream → outbox receive --from redis://
// → inbox, with the relay and the receiver SIGKILLed during the run: one
// inbox row per committed event, and the group ends with nothing pending.
func TestReceiveFromRedisWithKills(t *testing.T) {
	t.Parallel()
	b := setup(t)
	inboxS := inboxSchema(t)
	key := "outbox-cli-inbox-" + randomName()
	opts, err := redis.ParseURL(redisURL())
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() {
		_ = rdb.Del(context.Background(), key).Err()
		_ = rdb.Close()
	})
	db := testutil.DatabaseURL()
	relayArgs := []string{"--database-url", db, "--schema", b.schema, "--log-level", "warn", "relay",
		"--sink", redisURL(), "--route", key, "--batch-size", "10", "--poll-interval", "50ms", "--lease", "3s", "--sink-timeout", "2s"}
	receiverArgs := []string{"--database-url", db, "--schema", inboxS, "--log-format", "json",
		"receive", "--from", redisURL() + "?stream=" + key, "--consumer", "billing"}

	ids := b.writeN(t, 60)
	relay := start(t, nil, relayArgs...)
	receiver := start(t, nil, receiverArgs...)
	obsLogValue(t, receiver, "receiving from Redis Streams", "stream")
	for round := range 2 {
		seen := inboxCount(t, inboxS, "")
		testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("round %d: more messages received", round), func() bool {
			require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
			return inboxCount(t, inboxS, "") > seen
		})
		require.NoError(t, relay.cmd.Process.Signal(syscall.SIGKILL))
		require.NoError(t, receiver.cmd.Process.Signal(syscall.SIGKILL))
		<-relay.done
		<-receiver.done
		ids = append(ids, b.writeN(t, 30)...)
		relay = start(t, nil, relayArgs...)
		receiver = start(t, nil, receiverArgs...)
		obsLogValue(t, receiver, "receiving from Redis Streams", "stream")
	}
	testutil.WaitFor(t, 60*time.Second, "every event in the inbox", func() bool {
		require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
		return inboxCount(t, inboxS, "") == len(ids)
	})
	for _, id := range ids {
		require.Equal(t, 1, inboxCount(t, inboxS, `WHERE consumer = 'billing' AND message_id = $1`, strconv.FormatInt(id, 10)), "event %d", id)
	}
	testutil.WaitFor(t, 30*time.Second, "every entry acknowledged", func() bool {
		groups, err := rdb.XInfoGroups(context.Background(), key).Result()
		require.NoError(t, err)
		return len(groups) == 1 && groups[0].Pending == 0 && groups[0].Lag == 0
	})
	require.Equal(t, 0, relay.stop(t, syscall.SIGTERM))
	require.Equal(t, 0, receiver.stop(t, syscall.SIGTERM))
	requireFail(t, outboxCmd(t, inboxS, "receive", "--from", redisURL()), 2, "names no stream")
	requireFail(t, outboxCmd(t, inboxS, "receive", "--from", redisURL()+"?stream=k&maxlen=5"), 2, "maxlen is for publishing")
}

// Writer → outbox → relay → RabbitMQ queue → outbox receive --from amqp://
// → inbox, with the relay and the receiver SIGKILLed during the run: one
// inbox row per committed event, and the queue ends empty.
func TestReceiveFromRabbitMQWithKills(t *testing.T) {
	t.Parallel()
	b := setup(t)
	inboxS := inboxSchema(t)
	conn, err := amqp.Dial(amqpURL())
	require.NoError(t, err, "RabbitMQ is not reachable at TEST_AMQP_URL: start it with rabbitmq-server -detached")
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	exchange, queue := "outbox-cli-inbox-"+randomName(), "outbox-cli-inbox-"+randomName()
	require.NoError(t, ch.ExchangeDeclare(exchange, "topic", false, false, false, false, nil))
	t.Cleanup(func() { _ = ch.ExchangeDelete(exchange, false, false) })
	_, err = ch.QueueDeclare(queue, false, false, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	require.NoError(t, ch.QueueBind(queue, "#", exchange, false, nil))

	sinkURL, err := url.Parse(amqpURL())
	require.NoError(t, err)
	sq := sinkURL.Query()
	sq.Set("exchange", exchange)
	sinkURL.RawQuery = sq.Encode()
	fromURL, err := url.Parse(amqpURL())
	require.NoError(t, err)
	fq := fromURL.Query()
	fq.Set("queue", queue)
	fromURL.RawQuery = fq.Encode()

	db := testutil.DatabaseURL()
	relayArgs := []string{"--database-url", db, "--schema", b.schema, "--log-level", "warn", "relay",
		"--sink", sinkURL.String(), "--batch-size", "10", "--poll-interval", "50ms", "--lease", "3s", "--sink-timeout", "2s"}
	receiverArgs := []string{"--database-url", db, "--schema", inboxS, "--log-format", "json",
		"receive", "--from", fromURL.String(), "--consumer", "billing"}

	ids := b.writeN(t, 60)
	relay := start(t, nil, relayArgs...)
	receiver := start(t, nil, receiverArgs...)
	obsLogValue(t, receiver, "receiving from RabbitMQ", "queue")
	for round := range 2 {
		seen := inboxCount(t, inboxS, "")
		testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("round %d: more messages received", round), func() bool {
			require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
			return inboxCount(t, inboxS, "") > seen
		})
		require.NoError(t, relay.cmd.Process.Signal(syscall.SIGKILL))
		require.NoError(t, receiver.cmd.Process.Signal(syscall.SIGKILL))
		<-relay.done
		<-receiver.done
		ids = append(ids, b.writeN(t, 30)...)
		relay = start(t, nil, relayArgs...)
		receiver = start(t, nil, receiverArgs...)
		obsLogValue(t, receiver, "receiving from RabbitMQ", "queue")
	}
	testutil.WaitFor(t, 60*time.Second, "every event in the inbox", func() bool {
		require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
		return inboxCount(t, inboxS, "") == len(ids)
	})
	for _, id := range ids {
		require.Equal(t, 1, inboxCount(t, inboxS, `WHERE consumer = 'billing' AND message_id = $1`, strconv.FormatInt(id, 10)), "event %d", id)
	}
	require.Equal(t, 0, relay.stop(t, syscall.SIGTERM))
	require.Equal(t, 0, receiver.stop(t, syscall.SIGTERM))
	// Every delivery was acknowledged: nothing is left once the receiver's
	// connection closed.
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	require.NoError(t, err)
	require.Zero(t, q.Messages)
	requireFail(t, outboxCmd(t, inboxS, "receive", "--from", amqpURL()), 2, "names no queue")
}

// Writer → outbox → relay → Kafka (kfake, in this process) → outbox
// receive --from kafka:// → inbox, with the relay and the receiver
// SIGKILLed during the run: one inbox row per committed event.
func TestReceiveFromKafkaWithKills(t *testing.T) {
	t.Parallel()
	b := setup(t)
	inboxS := inboxSchema(t)
	topic := "outbox-cli-inbox-" + randomName()
	brokers, query := kafkaCluster(t, topic)
	db := testutil.DatabaseURL()
	relayArgs := []string{"--database-url", db, "--schema", b.schema, "--log-level", "warn", "relay",
		"--sink", "kafka://" + strings.Join(brokers, ",") + query, "--route", topic,
		"--batch-size", "10", "--poll-interval", "50ms", "--lease", "3s", "--sink-timeout", "2s"}
	receiverArgs := []string{"--database-url", db, "--schema", inboxS, "--log-format", "json",
		"receive", "--from", "kafka://" + strings.Join(brokers, ",") + "?topic=" + topic, "--consumer", "billing"}

	ids := b.writeN(t, 60)
	relay := start(t, nil, relayArgs...)
	receiver := start(t, nil, receiverArgs...)
	obsLogValue(t, receiver, "receiving from Kafka", "topics")
	// One round: a killed member holds its partitions until the group's
	// session timeout (45s) passes.
	for round := range 1 {
		seen := inboxCount(t, inboxS, "")
		testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("round %d: more messages received", round), func() bool {
			require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
			return inboxCount(t, inboxS, "") > seen
		})
		require.NoError(t, relay.cmd.Process.Signal(syscall.SIGKILL))
		require.NoError(t, receiver.cmd.Process.Signal(syscall.SIGKILL))
		<-relay.done
		<-receiver.done
		ids = append(ids, b.writeN(t, 30)...)
		relay = start(t, nil, relayArgs...)
		receiver = start(t, nil, receiverArgs...)
		obsLogValue(t, receiver, "receiving from Kafka", "topics")
	}
	testutil.WaitFor(t, 90*time.Second, "every event in the inbox", func() bool {
		require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
		return inboxCount(t, inboxS, "") == len(ids)
	})
	for _, id := range ids {
		require.Equal(t, 1, inboxCount(t, inboxS, `WHERE consumer = 'billing' AND message_id = $1`, strconv.FormatInt(id, 10)), "event %d", id)
	}
	require.Equal(t, 0, relay.stop(t, syscall.SIGTERM))
	require.Equal(t, 0, receiver.stop(t, syscall.SIGTERM))
	requireFail(t, outboxCmd(t, inboxS, "receive", "--from", "kafka://"+strings.Join(brokers, ",")), 2, "names no topic")
}

// Writer → outbox → relay → MQTT (QoS 1) → outbox receive --from mqtt://
// → inbox, with the relay and the receiver SIGKILLed during the run: the
// receiver's persistent session keeps what arrives while it is down, and
// the inbox ends with one row per committed event.
func TestReceiveFromMQTTWithKills(t *testing.T) {
	t.Parallel()
	b := setup(t)
	inboxS := inboxSchema(t)
	topic := "outbox-cli-inbox/" + randomName()
	mqttBroker := envOr("TEST_MQTT_URL", "mqtt://127.0.0.1:1883")
	db := testutil.DatabaseURL()
	relayArgs := []string{"--database-url", db, "--schema", b.schema, "--log-level", "warn", "relay",
		"--sink", mqttBroker, "--route", topic, "--batch-size", "10", "--poll-interval", "50ms", "--lease", "3s", "--sink-timeout", "2s"}
	clientID := "outbox-cli-" + randomName()
	receiverArgs := []string{"--database-url", db, "--schema", inboxS, "--log-format", "json",
		"receive", "--from", mqttBroker + "?topic=" + url.QueryEscape(topic) + "&client_id=" + clientID, "--consumer", "billing"}
	t.Cleanup(func() {
		// End the receiver's persistent session at the broker.
		c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + strings.TrimPrefix(mqttBroker, "mqtt://")).
			SetClientID(clientID).SetCleanSession(true))
		if tok := c.Connect(); tok.WaitTimeout(5*time.Second) && tok.Error() == nil {
			c.Disconnect(0)
		}
	})

	// The subscription exists before anything is published: MQTT keeps
	// messages only for sessions subscribed when they arrive.
	receiver := start(t, nil, receiverArgs...)
	obsLogValue(t, receiver, "receiving from MQTT", "topic")
	ids := b.writeN(t, 60)
	relay := start(t, nil, relayArgs...)
	for round := range 2 {
		seen := inboxCount(t, inboxS, "")
		testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("round %d: more messages received", round), func() bool {
			require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
			return inboxCount(t, inboxS, "") > seen
		})
		require.NoError(t, relay.cmd.Process.Signal(syscall.SIGKILL))
		require.NoError(t, receiver.cmd.Process.Signal(syscall.SIGKILL))
		<-relay.done
		<-receiver.done
		ids = append(ids, b.writeN(t, 30)...)
		relay = start(t, nil, relayArgs...)
		receiver = start(t, nil, receiverArgs...)
		obsLogValue(t, receiver, "receiving from MQTT", "topic")
	}
	testutil.WaitFor(t, 60*time.Second, "every event in the inbox", func() bool {
		require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
		return inboxCount(t, inboxS, "") == len(ids)
	})
	for _, id := range ids {
		require.Equal(t, 1, inboxCount(t, inboxS, `WHERE consumer = 'billing' AND message_id = $1`, strconv.FormatInt(id, 10)), "event %d", id)
	}
	require.Equal(t, 0, relay.stop(t, syscall.SIGTERM))
	require.Equal(t, 0, receiver.stop(t, syscall.SIGTERM))
	requireFail(t, outboxCmd(t, inboxS, "receive", "--from", mqttBroker), 2, "names no topic")
}

// outbox receive --from nats:// --metrics-addr serves the durable
// consumer's pending count from JetStream: 0 with the ok gauge at 1 once
// every published message is stored and acknowledged.
// brokerReport is a consumer's entry of outbox stats --json on an
// inbox-only schema, nil when the consumer is not listed.
func brokerReport(t *testing.T, schema, consumer string) map[string]any {
	t.Helper()
	res := outboxCmd(t, schema, "stats", "--json")
	requireOK(t, res)
	var doc struct {
		OutboxAbsent bool             `json:"outbox_absent"`
		Consumers    []map[string]any `json:"consumers"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
	require.True(t, doc.OutboxAbsent)
	for _, c := range doc.Consumers {
		if c["consumer"] == consumer {
			return c
		}
	}
	return nil
}

// outbox receive --from nats:// records the broker's pending count in
// inbox_consumers, and outbox stats shows it with its age: 5 while the
// inbox table is locked against the receiver's inserts, then 0 once the
// receiver drained the stream.
func TestReceiveFromNATSStatsShowBrokerPending(t *testing.T) {
	t.Parallel()
	inboxS := inboxSchema(t)
	js := natsStream(t)
	ctx := context.Background()
	for i := range 5 {
		_, err := js.js.Publish(ctx, js.prefix+".created", []byte(fmt.Sprintf(`{"n":%d}`, i)), jetstream.WithMsgID(fmt.Sprint("m-", i)))
		require.NoError(t, err)
	}
	// EXCLUSIVE blocks the receiver's INSERTs and lets stats read.
	lock, err := testutil.Pool(t).Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, `LOCK TABLE `+pgx.Identifier{inboxS, "inbox_messages"}.Sanitize()+` IN EXCLUSIVE MODE`)
	require.NoError(t, err)

	receiver := start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", inboxS, "--log-format", "json",
		"receive", "--from", "nats://"+natsAddr()+"?stream="+js.stream, "--consumer", "billing")
	var c map[string]any
	testutil.WaitFor(t, 30*time.Second, "the broker's pending count 5 in outbox stats", func() bool {
		require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
		c = brokerReport(t, inboxS, "billing")
		return c != nil && c["broker_pending"] == float64(5)
	})
	require.Equal(t, "nats", c["broker"])
	require.Equal(t, false, c["broker_pending_stale"])
	require.Less(t, c["broker_reported_age_seconds"], float64(15))
	require.Equal(t, float64(0), c["unprocessed"], "nothing stored yet")
	text := outboxCmd(t, inboxS, "stats")
	requireOK(t, text)
	require.Regexp(t, `billing +0 +0s +5 \(nats, reported \d+s ago\)\n`, text.stdout)
	require.NotContains(t, text.stdout, "STALE")

	require.NoError(t, lock.Rollback(ctx))
	testutil.WaitFor(t, 60*time.Second, "every message stored and the broker's pending at 0 in outbox stats", func() bool {
		require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
		c = brokerReport(t, inboxS, "billing")
		return inboxCount(t, inboxS, "") == 5 && c != nil && c["broker_pending"] == float64(0)
	})
	require.Equal(t, float64(5), c["unprocessed"])
	require.Equal(t, 0, receiver.stop(t, syscall.SIGTERM))
}

// A receiver on an inbox migrated before inbox_consumers keeps receiving:
// it warns once that outbox stats cannot show the broker's pending count.
func TestReceiveFromNATSWithoutInboxConsumers(t *testing.T) {
	t.Parallel()
	inboxS := inboxSchema(t)
	_, err := testutil.Pool(t).Exec(context.Background(), `DROP TABLE `+pgx.Identifier{inboxS, "inbox_consumers"}.Sanitize())
	require.NoError(t, err)
	js := natsStream(t)
	ctx := context.Background()
	for i := range 3 {
		_, err := js.js.Publish(ctx, js.prefix+".created", []byte(fmt.Sprintf(`{"n":%d}`, i)), jetstream.WithMsgID(fmt.Sprint("m-", i)))
		require.NoError(t, err)
	}
	receiver := start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", inboxS, "--log-format", "json",
		"receive", "--from", "nats://"+natsAddr()+"?stream="+js.stream, "--consumer", "billing")
	testutil.WaitFor(t, 30*time.Second, "every message stored", func() bool {
		require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
		return inboxCount(t, inboxS, "") == 3
	})
	// Past a second read of the broker.
	time.Sleep(6 * time.Second)
	require.Equal(t, 0, receiver.stop(t, syscall.SIGTERM))
	require.Equal(t, 1, strings.Count(receiver.stderr.String(), "run outbox migrate --inbox"), receiver.stderr.String())
	c := brokerReport(t, inboxS, "billing")
	require.NotNil(t, c)
	require.NotContains(t, c, "broker_pending")
}

func TestReceiveFromNATSServesBrokerPending(t *testing.T) {
	t.Parallel()
	inboxS := inboxSchema(t)
	js := natsStream(t)
	ctx := context.Background()
	for i := range 5 {
		_, err := js.js.Publish(ctx, js.prefix+".created", []byte(fmt.Sprintf(`{"n":%d}`, i)), jetstream.WithMsgID(fmt.Sprint("m-", i)))
		require.NoError(t, err)
	}
	receiver := start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", inboxS, "--log-format", "json",
		"receive", "--from", "nats://"+natsAddr()+"?stream="+js.stream, "--consumer", "billing", "--metrics-addr", "127.0.0.1:0")
	metrics := "http://" + obsLogValue(t, receiver, "serving metrics", "addr") + "/metrics"
	testutil.WaitFor(t, 30*time.Second, "every message stored and the broker's pending at 0", func() bool {
		require.False(t, receiver.exited(), "receiver exited; stderr:\n%s", receiver.stderr.String())
		_, m := obsGet(t, metrics)
		return inboxCount(t, inboxS, "") == 5 &&
			strings.Contains(m, `outbox_consumer_broker_pending{broker="nats",consumer="billing"} 0`) &&
			strings.Contains(m, `outbox_consumer_broker_pending_ok{broker="nats",consumer="billing"} 1`)
	})
	require.Equal(t, 0, receiver.stop(t, syscall.SIGTERM))
}
