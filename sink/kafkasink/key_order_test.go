package kafkasink_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sinktest"
)

// failFirstProduce makes the cluster answer its first produce request with
// code for every partition in it. The request is held until release is
// called; seen is closed once it arrived. records reports how many records
// it held.
func failFirstProduce(t *testing.T, c *cluster, code int16) (seen <-chan struct{}, release func(), records *atomic.Int32) {
	t.Helper()
	if c.real() {
		t.Skip("needs kfake's request control; the conformance suite's KeyOrderAfterFailure covers a real cluster")
	}
	records = &atomic.Int32{}
	seenCh, released := make(chan struct{}), make(chan struct{})
	c.fake.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				var batch kmsg.RecordBatch
				if err := batch.ReadFrom(rp.Records); err == nil {
					records.Add(batch.NumRecords)
				}
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode, sp.BaseOffset = rp.Partition, code, -1
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		close(seenCh)
		c.fake.SleepControl(func() { <-released })
		return resp, nil, true
	})
	var once atomic.Bool
	return seenCh, func() {
		if once.CompareAndSwap(false, true) {
			close(released)
		}
	}, records
}

// storedIDs waits until the topic holds event want, then returns every
// event ID it holds.
func storedIDs(t *testing.T, c *cluster, topic string, want int64) map[int64]bool {
	t.Helper()
	read := sinktest.DeliveriesOf(c.reader(t, topic))
	ids := map[int64]bool{}
	deadline := time.Now().Add(sinktest.Timeout)
	for !ids[want] {
		require.True(t, time.Now().Before(deadline), "event %d never reached the topic", want)
		for _, d := range read(t) { // polls for up to 100ms
			ids[d.ID] = true
		}
	}
	return ids
}

// TestFranzGoFailsRecordsBehindAFailedBatch checks the client behaviour
// the key-ordered path relies on, with the sink's producer settings
// (idempotent, acks from all replicas): when the broker fails a record
// batch, every record of that partition buffered or in flight behind it
// fails as well, and none of them is stored.
func TestFranzGoFailsRecordsBehindAFailedBatch(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	require.NoError(t, cl.ProduceSync(t.Context(), &kgo.Record{Value: []byte(`warm-up`)}).FirstErr())

	seen, release, first := failFirstProduce(t, c, kerr.InvalidRecord.Code)
	defer release()
	results := make(chan error, 6)
	produce := func(n int) {
		e := sinktest.NewEvent("order.created", fmt.Sprintf(`{"n":%d}`, n))
		r := &kgo.Record{Key: []byte("order-1"), Value: e.Payload}
		cl.Produce(t.Context(), r, func(_ *kgo.Record, err error) { results <- err })
	}
	produce(0)
	select {
	case <-seen:
	case <-time.After(sinktest.Timeout):
		t.Fatal("the first record was never sent")
	}
	for n := 1; n < 6; n++ {
		produce(n) // behind the first, in flight
	}
	release()
	require.Equal(t, int32(1), first.Load(), "the failed request held the first record only")
	for range 6 {
		select {
		case err := <-results:
			require.ErrorIs(t, err, kerr.InvalidRecord, "every record behind the failed batch fails with its error")
		case <-time.After(sinktest.Timeout):
			t.Fatal("a record behind the failed batch got no result")
		}
	}
	require.NoError(t, cl.ProduceSync(t.Context(), &kgo.Record{Value: []byte(`later`)}).FirstErr(), "the client recovers (a new producer epoch)")
	read := c.reader(t, topic)
	var values []string
	deadline := time.Now().Add(sinktest.Timeout)
	for len(values) < 2 {
		require.True(t, time.Now().Before(deadline), "the later record never reached the topic")
		for _, r := range read(t)[len(values):] { // polls for up to 100ms
			values = append(values, string(r.Payload))
		}
	}
	require.Equal(t, []string{"warm-up", "later"}, values, "nothing of the failed records was stored")
}

// TestKeyOrderedBrokerFailure checks the sink's results when the broker
// fails an aggregate's records: the first gets the broker's error, the
// ones behind it outbox.ErrEarlierEventFailed (not the broker's permanent
// error, so they are not dead-lettered), and none is stored.
func TestKeyOrderedBrokerFailure(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 1)
	s := newSink(t, c.config(t, topic))
	// Warm up: the client knows the topic's partitions.
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("order.created", `{}`)}))
	_, release, _ := failFirstProduce(t, c, kerr.InvalidRecord.Code)
	release() // answered at once

	var events []outbox.Event
	for n := range 6 {
		e := sinktest.NewEvent("order.created", fmt.Sprintf(`{"n":%d}`, n))
		e.AggregateID = "order-1"
		events = append(events, e)
	}
	ctx, cancel := context.WithTimeout(outbox.WithKeyOrder(t.Context()), 10*time.Second)
	defer cancel()
	errs := s.Publish(ctx, events)
	require.Len(t, errs, len(events))
	require.ErrorIs(t, errs[0], kerr.InvalidRecord, "the first record: the broker's own error")
	for i := 1; i < len(events); i++ {
		require.ErrorIs(t, errs[i], outbox.ErrEarlierEventFailed, "record %d is behind a failed one of its aggregate", i)
		require.False(t, outbox.IsPermanent(errs[i]), "record %d is held back, not dead: %v", i, errs[i])
	}
	later := sinktest.NewEvent("order.created", `{"later":true}`)
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{later}))
	ids := storedIDs(t, c, topic, later.ID)
	for _, e := range events {
		require.False(t, ids[e.ID], "event %d of the failed batch was stored", e.ID)
	}
}

// TestBatchRefusalIsNotEveryRecordsFault checks the results when the
// brokers refuse a whole record batch (MESSAGE_TOO_LARGE: one record over
// the topic's max.message.bytes fails every record batched with it): the
// records that shared the refusal are retried, not dead-lettered, and a
// record refused alone is.
func TestBatchRefusalIsNotEveryRecordsFault(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 1)
	s := newSink(t, c.config(t, topic))
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("order.created", `{}`)}))

	seen, release, _ := failFirstProduce(t, c, kerr.MessageTooLarge.Code)
	var events []outbox.Event
	for n := range 5 {
		events = append(events, sinktest.NewEvent("order.created", fmt.Sprintf(`{"n":%d}`, n)))
	}
	done := make(chan []error, 1)
	go func() { done <- s.Publish(t.Context(), events) }()
	<-seen
	release() // the records behind the first wait in the client, then fail with it
	errs := <-done
	require.Len(t, errs, len(events))
	for i, err := range errs {
		require.ErrorIs(t, err, kerr.MessageTooLarge, "record %d", i)
		require.False(t, outbox.IsPermanent(err), "record %d shared the batch's refusal: retried, not dead-lettered: %v", i, err)
		require.ErrorContains(t, err, "refused the record batch it was in")
	}

	// Alone, the refusal is the record's own.
	_, release, _ = failFirstProduce(t, c, kerr.MessageTooLarge.Code)
	release()
	errs = s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("order.created", `{"big":true}`)})
	require.Len(t, errs, 1)
	require.True(t, outbox.IsPermanent(errs[0]), "a record refused alone is dead-lettered: %v", errs[0])
}
