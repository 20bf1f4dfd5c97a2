package mqttinbox_test

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

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/mqttinbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/relaytest"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/mqttsink"
)

func TestMain(m *testing.M) { relaytest.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

func mqttURL() string {
	if u := os.Getenv("TEST_MQTT_URL"); u != "" {
		return u
	}
	return "mqtt://127.0.0.1:1883"
}

func randomName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// connect connects a consumer client: a persistent session, manual acks.
func connect(t *testing.T, id string) mqtt.Client {
	t.Helper()
	opts := mqtt.NewClientOptions().AddBroker("tcp://" + mqttURL()[len("mqtt://"):]).SetClientID(id).
		SetCleanSession(false).SetAutoAckDisabled(true)
	c := mqtt.NewClient(opts)
	tok := c.Connect()
	require.True(t, tok.WaitTimeout(10*time.Second), "the MQTT broker is not reachable at TEST_MQTT_URL (default %s): start it (see DEVELOPERS.md)", mqttURL())
	require.NoError(t, tok.Error())
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

// Two consumers subscribe to one topic, so each gets every message; the
// relay's mqttsink publishes 20 events twice (a relay that died before
// marking them); one handler fails once. Every event's effect applies
// exactly once, and every delivery was acknowledged after its commit.
func TestConsumeAppliesEachEventOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	topic := "outbox-mqttinbox/" + randomName()

	pool := testutil.Pool(t)
	schema := testutil.EmptySchemaName(t)
	_, err := outboxmigrate.MigrateInbox(ctx, outbox.Postgres(pool), outboxmigrate.Config{Schema: schema})
	require.NoError(t, err)
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	_, err = pool.Exec(ctx, `CREATE TABLE `+effects+` (event_id text NOT NULL)`)
	require.NoError(t, err)
	in, err := inbox.New(inbox.Config{Schema: schema, Consumer: "billing"})
	require.NoError(t, err)
	count := func() int {
		var c int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+effects).Scan(&c))
		return c
	}

	const n = 20
	var (
		failedOnce atomic.Bool
		settled    atomic.Int64
		wg         sync.WaitGroup
	)
	runCtx, stop := context.WithCancel(ctx)
	subscribed := make(chan struct{}, 2)
	for i := range 2 {
		client := connect(t, "outbox-mqttinbox-"+randomName())
		p := []*pgxpool.Pool{pool, testutil.NewPool(t, "mqttinbox")}[i]
		wg.Go(func() {
			err := mqttinbox.Consume(runCtx, client, topic, mqttinbox.Config{RetryDelay: 20 * time.Millisecond, Logger: quiet,
				OnSubscribed: func() { subscribed <- struct{}{} },
				Receive: func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
					res, err := in.Handle(ctx, p, m, func(ctx context.Context, tx pgx.Tx) error {
						if m.ID == "7" && failedOnce.CompareAndSwap(false, true) {
							return errors.New("the payment service is down")
						}
						_, err := tx.Exec(ctx, `INSERT INTO `+effects+` (event_id) VALUES ($1)`, m.ID)
						return err
					})
					if err == nil {
						settled.Add(1)
					}
					return res, err
				}})
			if err != nil {
				t.Error(err)
			}
		})
	}
	<-subscribed
	<-subscribed

	router, err := route.New(topic)
	require.NoError(t, err)
	sink, err := mqttsink.New(ctx, mqttsink.Config{URL: mqttURL(), Router: router, Source: "/orders", Logger: quiet})
	require.NoError(t, err)
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = outbox.Event{ID: int64(i + 1), EventType: "order.created", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), CreatedAt: time.Now()}
	}
	require.Nil(t, sink.Publish(ctx, events))
	require.Nil(t, sink.Publish(ctx, events))
	require.NoError(t, sink.Close())

	testutil.WaitFor(t, 30*time.Second, "every delivery settled", func() bool {
		return settled.Load() == 4*n
	})
	stop()
	wg.Wait()
	require.True(t, failedOnce.Load())
	var distinct int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(DISTINCT event_id) FROM `+effects).Scan(&distinct))
	require.Equal(t, n, count(), "one effect per event")
	require.Equal(t, n, distinct)
}

func TestMessageFromEvent(t *testing.T) {
	t.Parallel()
	m, err := mqttinbox.Message([]byte(`{"specversion":"1.0","id":"3","type":"order.created","source":"/orders","correlationid":"r-1","data":{"a": 1}}`), "mqtt:t")
	require.NoError(t, err)
	require.Equal(t, "3", m.ID)
	require.Equal(t, "/orders", m.Source)
	require.Equal(t, "order.created", m.EventType)
	require.Equal(t, "r-1", m.Headers["correlationid"])
	require.Equal(t, `{"a": 1}`, string(m.Payload))
	_, err = mqttinbox.Message([]byte(`{"id":"3","data_base64":"aGk="}`), "mqtt:t")
	require.Error(t, err)
	_, err = mqttinbox.Message([]byte(`not json`), "mqtt:t")
	require.Error(t, err)
	_, err = mqttinbox.Message([]byte(`{"data":{}}`), "mqtt:t")
	require.Error(t, err, "no id")
}

// A consumer that stopped (gracefully, as in a deploy) keeps its session's
// subscription: what is published while it is down waits at the broker,
// arrives right after the next connection (before any SUBSCRIBE), and is
// stored and acknowledged, not dropped for want of a handler.
func TestConsumeReceivesWhatTheSessionKeptWhileDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	topic := "outbox-mqttinbox/" + randomName()
	rawURL := mqttURL() + "?topic=" + topic
	clientID := "outbox-mqttinbox-" + randomName()
	t.Cleanup(func() {
		// End the persistent session at the broker.
		c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + mqttURL()[len("mqtt://"):]).
			SetClientID(clientID).SetCleanSession(true))
		if tok := c.Connect(); tok.WaitTimeout(5*time.Second) && tok.Error() == nil {
			c.Disconnect(0)
		}
	})
	var (
		mu     sync.Mutex
		stored = map[string]bool{}
	)
	receive := func(_ context.Context, m inbox.Message) (inbox.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		stored[m.ID] = true
		return inbox.Result{}, nil
	}
	consume := func(runCtx context.Context, subscribed chan<- struct{}) (mqtt.Client, <-chan error) {
		client, filter, err := mqttinbox.Open(rawURL, clientID)
		require.NoError(t, err)
		require.False(t, client.IsConnectionOpen(), "Open leaves the client for Consume to connect")
		done := make(chan error, 1)
		go func() {
			done <- mqttinbox.Consume(runCtx, client, filter, mqttinbox.Config{Logger: quiet, Receive: receive,
				OnSubscribed: func() { close(subscribed) }})
		}()
		return client, done
	}

	// The first run subscribes the session, then stops.
	firstCtx, stopFirst := context.WithCancel(ctx)
	subscribed := make(chan struct{})
	client, done := consume(firstCtx, subscribed)
	<-subscribed
	stopFirst()
	require.NoError(t, <-done)
	client.Disconnect(100)

	// Published while no consumer runs.
	router, err := route.New(topic)
	require.NoError(t, err)
	sink, err := mqttsink.New(ctx, mqttsink.Config{URL: mqttURL(), Router: router, Source: "/orders", Logger: quiet})
	require.NoError(t, err)
	const n = 20
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = outbox.Event{ID: int64(i + 1), EventType: "order.created", Payload: json.RawMessage(`{}`), CreatedAt: time.Now()}
	}
	require.Nil(t, sink.Publish(ctx, events))
	require.NoError(t, sink.Close())

	secondCtx, stopSecond := context.WithCancel(ctx)
	client, done = consume(secondCtx, make(chan struct{}))
	testutil.WaitFor(t, 20*time.Second, "every message kept by the session stored", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(stored) == n
	})
	stopSecond()
	require.NoError(t, <-done)
	client.Disconnect(100)
}
