package kafkainbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/inbox/kafkainbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/relaytest"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/kafkasink"
)

func TestMain(m *testing.M) { relaytest.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// The relay's kafkasink produces 20 events over 3 partitions, twice (a
// relay that died before marking them); one handler fails once. Two
// members of one consumer group, each with its own database pool, apply
// every event's effect exactly once and commit every record's offset.
func TestConsumeAppliesEachEventOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const topic = "shop.order"
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	require.NoError(t, err)
	t.Cleanup(fake.Close)
	brokers := fake.ListenAddrs()

	router, err := route.New(topic)
	require.NoError(t, err)
	sink, err := kafkasink.New(ctx, kafkasink.Config{Brokers: brokers, Router: router, Source: "/orders", Logger: quiet})
	require.NoError(t, err)
	const n = 20
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = outbox.Event{ID: int64(i + 1), EventType: "order.created", AggregateID: fmt.Sprint("o-", i%5),
			Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), CreatedAt: time.Now()}
	}
	require.Nil(t, sink.Publish(ctx, events))
	require.Nil(t, sink.Publish(ctx, events))
	require.NoError(t, sink.Close())

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

	var failedOnce atomic.Bool
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var clients []*kgo.Client
	for i := range 2 {
		cl, err := kgo.NewClient(append(kafkainbox.Options("billing", topic), kgo.SeedBrokers(brokers...))...)
		require.NoError(t, err)
		clients = append(clients, cl)
		p := []*pgxpool.Pool{pool, testutil.NewPool(t, "kafkainbox")}[i]
		wg.Go(func() {
			err := kafkainbox.Consume(runCtx, cl, kafkainbox.Config{BatchSize: 4, RetryDelay: 20 * time.Millisecond, Logger: quiet,
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
	testutil.WaitFor(t, 30*time.Second, "every event applied and every record's offset committed", func() bool {
		return count() == n && committedOffsets(t, brokers, "billing", topic, 3) == 2*n
	})
	stop()
	wg.Wait()
	for _, cl := range clients {
		cl.Close()
	}
	require.True(t, failedOnce.Load())
	var distinct int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(DISTINCT event_id) FROM `+effects).Scan(&distinct))
	require.Equal(t, n, count(), "one effect per event")
	require.Equal(t, n, distinct)

}

// committedOffsets sums the group's committed offsets over the topic's
// partitions.
func committedOffsets(t *testing.T, brokers []string, group, topic string, partitions int32) int64 {
	t.Helper()
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	defer admin.Close()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	for p := range partitions {
		rt.Partitions = append(rt.Partitions, p)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), admin)
	require.NoError(t, err)
	var committed int64
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			if p.ErrorCode == 0 && p.Offset > 0 {
				committed += p.Offset
			}
		}
	}
	return committed
}

func TestMessageFromRecord(t *testing.T) {
	t.Parallel()
	r := &kgo.Record{Topic: "shop.order", Value: []byte(`{"a":1}`), Headers: []kgo.RecordHeader{
		{Key: "ce_id", Value: []byte("3")}, {Key: "ce_source", Value: []byte("/orders")}, {Key: "ce_type", Value: []byte("order.created")},
		{Key: "ce_correlationid", Value: []byte("r%C3%A9q")}, {Key: "traceparent", Value: []byte("00-abc-def-01")},
	}}
	m, err := kafkainbox.Message(r, "")
	require.NoError(t, err)
	require.Equal(t, "3", m.ID)
	require.Equal(t, "/orders", m.Source)
	require.Equal(t, "order.created", m.EventType)
	require.Equal(t, "réq", m.Headers["correlationid"])
	require.Equal(t, "00-abc-def-01", m.Headers["traceparent"])
	m, err = kafkainbox.Message(&kgo.Record{Topic: "t", Value: []byte(`{}`), Headers: []kgo.RecordHeader{{Key: "ce_id", Value: []byte("1")}}}, "")
	require.NoError(t, err)
	require.Equal(t, "kafka:t", m.Source)
	_, err = kafkainbox.Message(&kgo.Record{Topic: "t", Value: []byte(`{}`)}, "")
	require.Error(t, err, "no ce_id")
}

// Pending on kfake: 12 records over 3 partitions and a group that joined
// and committed nothing is 12; after Consume stored and committed 5 it is
// 7. A group the brokers do not know is an error, not 0.
func TestPendingIsTheGroupLag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const topic = "shop.order"
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	require.NoError(t, err)
	t.Cleanup(fake.Close)
	brokers := fake.ListenAddrs()

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	for i := range 12 {
		r := &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf(`{"n":%d}`, i)),
			Headers: []kgo.RecordHeader{{Key: "ce_id", Value: []byte(fmt.Sprint(i + 1))}, {Key: "ce_source", Value: []byte("/orders")}}}
		require.NoError(t, prod.ProduceSync(ctx, r).FirstErr())
	}
	prod.Close()

	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	_, err = kafkainbox.Pending(ctx, admin, "nobody")
	require.ErrorContains(t, err, "group nobody", "a group the brokers do not know has no lag to report")
	var n int64

	cl, err := kgo.NewClient(append(kafkainbox.Options("billing", topic), kgo.SeedBrokers(brokers...))...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	var received atomic.Int64
	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop) // a failed wait below ends Consume too
	done := make(chan error, 1)
	go func() {
		done <- kafkainbox.Consume(runCtx, cl, kafkainbox.Config{Logger: quiet, BatchSize: 1, RetryDelay: time.Hour,
			Receive: func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
				if received.Add(1) > 5 {
					return inbox.Result{}, errors.New("database down")
				}
				return inbox.Result{}, nil
			}})
	}()
	testutil.WaitFor(t, 10*time.Second, "the group to commit 5 records", func() bool {
		n, err = kafkainbox.Pending(ctx, admin, "billing")
		return err == nil && n == 7
	})
	stop()
	require.NoError(t, <-done)
	n, err = kafkainbox.Pending(ctx, admin, "billing")
	require.NoError(t, err)
	require.EqualValues(t, 7, n, "12 produced, 5 committed")
}
