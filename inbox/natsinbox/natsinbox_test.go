package natsinbox_test

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
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/natsinbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/relaytest"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/natssink"
)

func TestMain(m *testing.M) { relaytest.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

func natsAddr() string {
	if a := os.Getenv("OUTBOX_TEST_NATS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:4222"
}

func connect(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect("nats://"+natsAddr(), nats.Name("outbox-natsinbox-test"))
	require.NoError(t, err, "NATS with JetStream is not reachable at %s (set OUTBOX_TEST_NATS_ADDR): start it with nats-server -js", natsAddr())
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

func randomName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// The relay's natssink publishes 20 events; a relay that restarted
// publishes them again after the stream's duplicate window (simulated by
// copies without Nats-Msg-Id); one handler fails once. Two consumer
// instances, each with its own NATS connection and database pool, pull
// from one durable consumer: every event's effect applies exactly once,
// and every message ends acknowledged.
func TestConsumeAppliesEachEventOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := connect(t)
	name := "inbox" + randomName()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })

	router, err := route.New(name + ".{event_type}")
	require.NoError(t, err)
	sink, err := natssink.New(ctx, natssink.Config{Servers: []string{natsAddr()}, Stream: name,
		Router: router, Source: "/orders", Logger: quiet})
	require.NoError(t, err)
	const n = 20
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = outbox.Event{ID: int64(i + 1), EventType: "created", AggregateID: fmt.Sprint(i),
			Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), CreatedAt: time.Now()}
	}
	require.Nil(t, sink.Publish(ctx, events))
	require.NoError(t, sink.Close())
	// The same messages again, as the stream would keep them past its
	// duplicate window.
	for seq := uint64(1); seq <= n; seq++ {
		raw, err := stream.GetMsg(ctx, seq)
		require.NoError(t, err)
		h := raw.Header
		h.Del(jetstream.MsgIDHeader)
		_, err = js.PublishMsg(ctx, &nats.Msg{Subject: raw.Subject, Header: h, Data: raw.Data})
		require.NoError(t, err)
	}

	pool := testutil.Pool(t)
	schema := testutil.EmptySchemaName(t)
	_, err = outboxmigrate.MigrateInbox(ctx, outbox.Postgres(pool), outboxmigrate.Config{Schema: schema})
	require.NoError(t, err)
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	_, err = pool.Exec(ctx, `CREATE TABLE `+effects+` (event_id text NOT NULL)`)
	require.NoError(t, err)
	in, err := inbox.New(inbox.Config{Schema: schema, Consumer: "billing"})
	require.NoError(t, err)

	cons, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "billing",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second})
	require.NoError(t, err)

	var failedOnce atomic.Bool
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 2 {
		_, js2 := connect(t)
		cons2, err := js2.Consumer(ctx, name, "billing")
		require.NoError(t, err)
		p := []*pgxpool.Pool{pool, testutil.NewPool(t, "natsinbox")}[i]
		wg.Go(func() {
			err := natsinbox.Consume(runCtx, cons2, natsinbox.Config{BatchSize: 5, MaxWait: 200 * time.Millisecond,
				NakDelay: 50 * time.Millisecond, Logger: quiet,
				Receive: func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
					return in.Handle(ctx, p, m, func(ctx context.Context, tx pgx.Tx) error {
						if m.ID == "5" && failedOnce.CompareAndSwap(false, true) {
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
	testutil.WaitFor(t, 30*time.Second, "every message acknowledged", func() bool {
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		return info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream == 2*n
	})
	stop()
	wg.Wait()
	require.True(t, failedOnce.Load(), "the failing handler ran")

	var count, distinct int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM `+effects).Scan(&count, &distinct))
	require.Equal(t, n, count, "one effect per event")
	require.Equal(t, n, distinct)
	var source, typ string
	require.NoError(t, pool.QueryRow(ctx, `SELECT source, event_type FROM `+pgx.Identifier{schema, "inbox_messages"}.Sanitize()+` WHERE message_id = '1'`).Scan(&source, &typ))
	require.Equal(t, "/orders", source)
	require.Equal(t, "created", typ)
}

func TestMessageFromHeaders(t *testing.T) {
	t.Parallel()
	h := nats.Header{}
	h.Set("ce-id", "7")
	h.Set("ce-source", "/orders")
	h.Set("ce-type", "order.created")
	h.Set("ce-correlationid", "r%C3%A9q")
	h.Set(jetstream.MsgIDHeader, "7")
	m, err := natsinbox.Message(h, []byte(`{}`), "nats:S")
	require.NoError(t, err)
	require.Equal(t, "7", m.ID)
	require.Equal(t, "/orders", m.Source)
	require.Equal(t, "order.created", m.EventType)
	require.Equal(t, "réq", m.Headers["correlationid"])

	only := nats.Header{}
	only.Set(jetstream.MsgIDHeader, "9")
	m, err = natsinbox.Message(only, []byte(`{}`), "nats:S")
	require.NoError(t, err)
	require.Equal(t, "9", m.ID)
	require.Equal(t, "nats:S", m.Source)

	_, err = natsinbox.Message(nats.Header{}, []byte(`{}`), "nats:S")
	require.Error(t, err, "no ID")
	_, err = natsinbox.Message(only, []byte(`nope`), "nats:S")
	require.Error(t, err, "not JSON")
}

// Pending on the real server: 10 messages in the stream and none consumed
// is 10; 4 fetched and not acknowledged still count (NumAckPending); 4
// acknowledged leave 6.
func TestPendingCountsUndeliveredAndUnacked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := connect(t)
	name := "pending" + randomName()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	cons, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "billing",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	require.NoError(t, err)

	n, err := natsinbox.Pending(ctx, cons)
	require.NoError(t, err)
	require.Zero(t, n)
	for i := range 10 {
		_, err := js.Publish(ctx, name+".created", []byte(fmt.Sprintf(`{"n":%d}`, i)))
		require.NoError(t, err)
	}
	n, err = natsinbox.Pending(ctx, cons)
	require.NoError(t, err)
	require.EqualValues(t, 10, n, "none consumed")

	batch, err := cons.Fetch(4, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var got []jetstream.Msg
	for m := range batch.Messages() {
		got = append(got, m)
	}
	require.Len(t, got, 4)
	n, err = natsinbox.Pending(ctx, cons)
	require.NoError(t, err)
	require.EqualValues(t, 10, n, "delivered and not acknowledged still pending")
	for _, m := range got {
		require.NoError(t, m.DoubleAck(ctx))
	}
	n, err = natsinbox.Pending(ctx, cons)
	require.NoError(t, err)
	require.EqualValues(t, 6, n, "4 acknowledged")

	require.NoError(t, js.DeleteConsumer(ctx, name, "billing"))
	_, err = natsinbox.Pending(ctx, cons)
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound)
}
