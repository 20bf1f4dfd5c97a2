package amqpinbox_test

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
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/amqpinbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/relaytest"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/amqpsink"
)

func TestMain(m *testing.M) { relaytest.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

func amqpURL() string {
	if u := os.Getenv("TEST_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

func dial(t *testing.T) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(amqpURL())
	require.NoError(t, err, "RabbitMQ is not reachable at TEST_AMQP_URL (default %s): start rabbitmq-server", amqpURL())
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// amqpsink publishes 20 events to a queue, twice (a relay that died before
// marking them); a consumer that died took 5 deliveries and never
// acknowledged them; one handler fails once. Two consumers, each on its
// own connection and database pool, apply every event's effect exactly
// once, and the queue ends empty.
func TestConsumeAppliesEachEventOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, err := dial(t).Channel()
	require.NoError(t, err)
	var b [4]byte
	_, _ = rand.Read(b[:])
	queue := "outbox-amqpinbox-" + hex.EncodeToString(b[:])
	_, err = admin.QueueDeclare(queue, false, false, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.QueueDelete(queue, false, false, false) })

	router, err := route.New(queue)
	require.NoError(t, err)
	sink, err := amqpsink.New(ctx, amqpsink.Config{URL: amqpURL(), Router: router, Source: "/orders", Logger: quiet})
	require.NoError(t, err)
	const n = 20
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = outbox.Event{ID: int64(i + 1), EventType: "order.created", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), CreatedAt: time.Now()}
	}
	require.Nil(t, sink.Publish(ctx, events))
	require.Nil(t, sink.Publish(ctx, events))
	require.NoError(t, sink.Close())

	// A consumer that dies holding 5 deliveries: the broker requeues them.
	deadConn := dial(t)
	dead, err := deadConn.Channel()
	require.NoError(t, err)
	require.NoError(t, dead.Qos(5, 0, false))
	deadDeliveries, err := dead.Consume(queue, "", false, false, false, false, nil)
	require.NoError(t, err)
	for range 5 {
		<-deadDeliveries
	}
	require.NoError(t, deadConn.Close())

	pool := testutil.Pool(t)
	schema := testutil.EmptySchemaName(t)
	_, err = outboxmigrate.MigrateInbox(ctx, outbox.Postgres(pool), outboxmigrate.Config{Schema: schema})
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

	var (
		failedOnce atomic.Bool
		settled    atomic.Int64 // deliveries whose Receive returned nil
	)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var conns []*amqp.Connection
	for i := range 2 {
		conn := dial(t)
		conns = append(conns, conn)
		ch, err := conn.Channel()
		require.NoError(t, err)
		p := []*pgxpool.Pool{pool, testutil.NewPool(t, "amqpinbox")}[i]
		wg.Go(func() {
			err := amqpinbox.Consume(runCtx, ch, queue, amqpinbox.Config{Prefetch: 4, RetryDelay: 20 * time.Millisecond, Logger: quiet,
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
	testutil.WaitFor(t, 30*time.Second, "every delivery settled", func() bool {
		return count() == n && settled.Load() == 2*n
	})
	stop()
	wg.Wait()
	for _, c := range conns {
		require.NoError(t, c.Close())
	}
	require.True(t, failedOnce.Load())
	var distinct int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(DISTINCT event_id) FROM `+effects).Scan(&distinct))
	require.Equal(t, n, count(), "one effect per event")
	require.Equal(t, n, distinct)
	// Every delivery was acknowledged: nothing came back once the
	// consumers' connections closed.
	q, err := admin.QueueDeclarePassive(queue, false, false, false, false, nil)
	require.NoError(t, err)
	require.Zero(t, q.Messages)
}

func TestMessageFromDelivery(t *testing.T) {
	t.Parallel()
	d := amqp.Delivery{MessageId: "3", Type: "order.created", Body: []byte(`{"a":1}`), Headers: amqp.Table{
		"cloudEvents_id": "3", "cloudEvents_source": "/orders", "cloudEvents_correlationid": "r-1", "traceparent": "00-a-b-01",
	}}
	m, err := amqpinbox.Message(d, "amqp:q")
	require.NoError(t, err)
	require.Equal(t, "3", m.ID)
	require.Equal(t, "/orders", m.Source)
	require.Equal(t, "order.created", m.EventType)
	require.Equal(t, "r-1", m.Headers["correlationid"])
	require.Equal(t, "00-a-b-01", m.Headers["traceparent"])
	m, err = amqpinbox.Message(amqp.Delivery{MessageId: "4", Body: []byte(`{}`), Headers: amqp.Table{"cloudEvents:type": "x"}}, "amqp:q")
	require.NoError(t, err)
	require.Equal(t, "4", m.ID)
	require.Equal(t, "amqp:q", m.Source)
	require.Equal(t, "x", m.EventType)
	_, err = amqpinbox.Message(amqp.Delivery{Body: []byte(`{}`)}, "amqp:q")
	require.Error(t, err)
}
