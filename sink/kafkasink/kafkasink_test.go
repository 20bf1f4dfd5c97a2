package kafkasink_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/internal/testutil/configtest"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/kafkasink"
	"github.com/outboxkit/outbox/sinktest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(t *testing.T) sinktest.Harness {
		c := newCluster(t)
		topic := c.topic(t, 3)
		f := newFaults(t)
		cfg := c.config(t, topic)
		cfg.Dial = f.dial
		cfg.DeliveryTimeout = 2 * time.Second
		s := newSink(t, cfg)
		h := sinktest.Harness{
			Sink:      s,
			Delivered: sinktest.DeliveriesOf(c.reader(t, topic)),
			Fail:      func(*testing.T) { f.Refuse() },
			Unreachable: func(*testing.T) outbox.Sink {
				f.Refuse()
				return s
			},
			// Larger than MaxRecordBytes: the client fails this record
			// alone, before buffering it.
			Reject: func(_ *testing.T, e *outbox.Event) {
				e.Payload = json.RawMessage(`{"blob":"` + strings.Repeat("x", 1500_000) + `"}`)
			},
		}
		if c.fake != nil {
			// Brokers that take produce requests and never answer them.
			h.Stall = func(*testing.T) (<-chan struct{}, func()) {
				stalled, release := make(chan struct{}, 1), make(chan struct{})
				c.fake.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
					select {
					case stalled <- struct{}{}:
					default:
					}
					c.fake.SleepControl(func() { <-release })
					return nil, nil, false
				})
				var once sync.Once
				return stalled, func() { once.Do(func() { close(release) }) }
			}
		}
		return h
	})
}

// header returns the value of r's header name, or "".
func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

func TestRecordCarriesCloudEventsHeaders(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 1)
	cfg := c.config(t, topic)
	cfg.Source = "https://shop.example.com/orders"
	s := newSink(t, cfg)
	e := brokertest.FullEvent(4711, "X-Note", `zoë says "100%"`)
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))

	r := c.consume(t, topic, 1)[0]
	require.Equal(t, topic, r.Topic)
	require.Equal(t, "o-42", string(r.Key), "the key is the aggregate ID")
	require.Equal(t, string(e.Payload), string(r.Value), "the value is the payload exactly as stored")
	want := map[string]string{
		"ce_specversion":   "1.0",
		"ce_id":            "4711",
		"ce_type":          "order.created",
		"ce_source":        "https://shop.example.com/orders",
		"ce_subject":       "o-42",
		"ce_time":          "2024-05-06T05:08:09.123456789Z",
		"content-type":     "application/json",
		"ce_aggregatetype": "order",
		"ce_correlationid": "corr-1",
		"ce_causationid":   "cause-1",
		"ce_schemaversion": "2",
		"ce_xnote":         `zoë says "100%"`,
		"traceparent":      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":       "vendor=abc",
	}
	got := map[string]string{}
	for _, h := range r.Headers {
		_, dup := got[h.Key]
		require.False(t, dup, "header %s appears twice", h.Key)
		got[h.Key] = string(h.Value)
	}
	require.Equal(t, want, got, "exactly the binary-mode CloudEvents headers (UTF-8, not percent-encoded) and the trace context")
}

func TestEventWithoutAggregateHasNoKey(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 1)
	s := newSink(t, c.config(t, topic))
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{{ID: 7, EventType: "ping", Payload: json.RawMessage(`{}`)}}))
	r := c.consume(t, topic, 1)[0]
	require.Nil(t, r.Key)
	for _, absent := range []string{"ce_subject", "ce_aggregatetype", "ce_time", "traceparent", "tracestate"} {
		require.Empty(t, header(r, absent), "header %s", absent)
	}
	require.Equal(t, "7", header(r, "ce_id"))
}

func TestOneAggregateStaysInOnePartitionInOrder(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 8)
	s := newSink(t, c.config(t, topic))
	var events []outbox.Event
	for i := range 200 {
		e := sinktest.NewEvent("seq", `{"i":`+strconv.Itoa(i)+`}`)
		e.AggregateID = "agg-" + strconv.Itoa(i%10)
		events = append(events, e)
	}
	require.Nil(t, s.Publish(t.Context(), events))
	partitions := map[string]int32{}
	last := map[string]int64{}
	usedPartitions := map[int32]bool{}
	for _, r := range c.consume(t, topic, len(events)) {
		key := string(r.Key)
		if p, ok := partitions[key]; ok {
			require.Equal(t, p, r.Partition, "aggregate %s moved partitions", key)
		}
		partitions[key] = r.Partition
		usedPartitions[r.Partition] = true
		id, err := strconv.ParseInt(header(r, "ce_id"), 10, 64)
		require.NoError(t, err)
		require.Greater(t, id, last[key], "aggregate %s's events out of order", key)
		last[key] = id
	}
	require.Greater(t, len(usedPartitions), 1, "keys spread over partitions")
}

func TestIllegalTopicFailsOnlyItsEvent(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 1)
	s := newSink(t, c.config(t, topic))
	bad := map[string]string{
		"Space":       "has space",
		"Slash":       "a/b",
		"Colon":       "a:b",
		"NonASCII":    "zoë",
		"Dot":         ".",
		"DotDot":      "..",
		"TooLong":     strings.Repeat("x", kafkasink.TopicMaxLen+1),
		"Newline":     "a\nb",
		"NullByte":    "a\x00",
		"Wildcardish": "orders.*",
	}
	var (
		events []outbox.Event
		names  []string
	)
	for name, tp := range bad {
		e := sinktest.NewEvent("poison", `{}`)
		e.Headers = map[string]string{route.Header: tp}
		events = append(events, e)
		names = append(names, name)
	}
	events = append(events, sinktest.NewEvent("fine", `{}`))
	errs := s.Publish(t.Context(), events)
	require.Len(t, errs, len(events))
	for i, name := range names {
		require.Error(t, errs[i], name)
		require.True(t, outbox.IsPermanent(errs[i]), "%s: %v", name, errs[i])
		require.Contains(t, errs[i].Error(), "topic", name)
	}
	require.NoError(t, errs[len(errs)-1])
	require.Equal(t, int64(1), c.count(t, topic))

	// A template that renders empty.
	cfg := c.config(t, topic)
	r, err := route.New("{header.missing}")
	require.NoError(t, err)
	cfg.Router = r
	errs = newSink(t, cfg).Publish(t.Context(), []outbox.Event{sinktest.NewEvent("x", `{}`)})
	require.Len(t, errs, 1)
	require.True(t, outbox.IsPermanent(errs[0]))
	require.Contains(t, errs[0].Error(), "is empty")
}

func TestOversizeRecordIsPermanent(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 1)
	cfg := c.config(t, topic)
	cfg.MaxRecordBytes = 64 << 10
	s := newSink(t, cfg)
	huge := sinktest.NewEvent("huge", `"`+strings.Repeat("x", 100<<10)+`"`)
	good := sinktest.NewEvent("fine", `{}`)
	errs := s.Publish(t.Context(), []outbox.Event{huge, good})
	require.Len(t, errs, 2)
	require.True(t, outbox.IsPermanent(errs[0]), "%v", errs[0])
	require.ErrorIs(t, errs[0], kerr.MessageTooLarge)
	require.Contains(t, errs[0].Error(), "shrink the event")
	require.NoError(t, errs[1])
	require.Equal(t, int64(1), c.count(t, topic))
}

func TestMissingTopicIsPermanentUnlessAutoCreated(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 1)
	missing := "outbox-test-missing-" + brokertest.RandomName()
	orphan := sinktest.NewEvent("orphan", `{}`)
	orphan.Headers = map[string]string{route.Header: missing}
	good := sinktest.NewEvent("kept", `{}`)

	s := newSink(t, c.config(t, topic))
	errs := s.Publish(t.Context(), []outbox.Event{orphan, good})
	require.Len(t, errs, 2)
	require.True(t, outbox.IsPermanent(errs[0]), "%v", errs[0])
	require.ErrorIs(t, errs[0], kerr.UnknownTopicOrPartition)
	require.Contains(t, errs[0].Error(), `"`+missing+`"`)
	require.Contains(t, errs[0].Error(), "create it")
	require.NoError(t, errs[1])

	cfg := c.config(t, topic)
	if !c.real() {
		// kfake creates topics on request only when told to.
		fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
		require.NoError(t, err)
		t.Cleanup(fake.Close)
		cfg.Brokers = fake.ListenAddrs()
	}
	cfg.AutoCreateTopics = true
	created := "outbox-test-auto-" + brokertest.RandomName()
	auto := sinktest.NewEvent("auto", `{}`)
	auto.Headers = map[string]string{route.Header: created}
	if c.real() {
		t.Cleanup(func() { c.deleteTopic(t, created) })
	}
	require.Nil(t, newSink(t, cfg).Publish(t.Context(), []outbox.Event{auto}), "the topic is created on first produce")
}

func TestConnectionLossIsRetryableAndTheSinkReconnects(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 1)
	f := newFaults(t)
	cfg := c.config(t, topic)
	cfg.Dial = f.dial
	s := newSink(t, cfg)
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("before", `{}`)}))

	f.Refuse()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	errs := s.Publish(ctx, []outbox.Event{sinktest.NewEvent("during", `{}`)})
	cancel()
	require.Len(t, errs, 1)
	require.Error(t, errs[0])
	require.False(t, outbox.IsPermanent(errs[0]), "an outage is retryable: %v", errs[0])

	f.Allow()
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("after", `{}`)}), "the client reconnects by itself")
	require.GreaterOrEqual(t, f.Accepted(), 2)
	n := c.count(t, topic)
	require.True(t, n == 2 || n == 3, "before and after, and maybe the abandoned record: %d", n)
}

func TestPublishAfterCloseIsRetryable(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 1)
	s := newSink(t, c.config(t, topic))
	require.ErrorIs(t, brokertest.PublishAfterClose(t, s), kgo.ErrClientClosed)
}

func TestNewFailsInOneLine(t *testing.T) {
	t.Parallel()
	const pw = "s3cret-pass"
	f := newFaults(t)
	f.Refuse()
	s, err := kafkasink.New(t.Context(), kafkasink.Config{
		Brokers: []string{"127.0.0.1:1"}, Dial: f.dial, SASL: kafkasink.SASLPlain, User: "u", Password: pw,
		ConnectTimeout: 500 * time.Millisecond, Logger: quiet,
	})
	require.Nil(t, s)
	brokertest.RequireConnectError(t, err, pw, "cannot reach a broker of 127.0.0.1:1")
}

func TestSASL(t *testing.T) {
	t.Parallel()
	const pw = "kafka-s3cret"
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "relay", pw))
	require.NoError(t, err)
	t.Cleanup(fake.Close)
	base := kafkasink.Config{Brokers: fake.ListenAddrs(), SASL: kafkasink.SASLScramSHA512, User: "relay", ConnectTimeout: 5 * time.Second, Logger: quiet}

	good := base
	good.Password = pw
	s := newSink(t, good)
	require.NotContains(t, s.String(), pw)

	bad := base
	bad.Password = "wrong-" + pw
	s2, err := kafkasink.New(t.Context(), bad)
	require.Nil(t, s2)
	brokertest.RequireConnectError(t, err, pw, "check the user name, password and sasl mechanism")
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	const pw = "hunter2-password"
	for _, tc := range []struct {
		name  string
		cfg   kafkasink.Config
		field string
		text  string
	}{
		{"NoBrokers", kafkasink.Config{}, "Brokers", "is empty"},
		{"EmptyBroker", kafkasink.Config{Brokers: []string{""}}, "Brokers", "entry 0 has an empty entry"},
		{"BadPort", kafkasink.Config{Brokers: []string{"h:x"}}, "Brokers", "port is not a number"},
		{"PasswordWithoutUser", kafkasink.Config{Brokers: []string{"h"}, Password: pw}, "User", "is empty but Password is set"},
		{"UserWithoutSASL", kafkasink.Config{Brokers: []string{"h"}, User: "u", Password: pw}, "SASL", "choose the mechanism"},
		{"SASLWithoutUser", kafkasink.Config{Brokers: []string{"h"}, SASL: kafkasink.SASLPlain}, "User", "is empty but SASL is set"},
		{"UnknownSASL", kafkasink.Config{Brokers: []string{"h"}, SASL: "gssapi", User: "u", Password: pw}, "SASL", `is "gssapi"`},
		{"Source", kafkasink.Config{Brokers: []string{"h"}, Source: "a b"}, "Source", "not a URI reference"},
		{"ClientID", kafkasink.Config{Brokers: []string{"h"}, ClientID: "a\nb"}, "ClientID", "control characters"},
		{"ConnectTimeout", kafkasink.Config{Brokers: []string{"h"}, ConnectTimeout: -1}, "ConnectTimeout", "positive"},
		{"MaxRecordBytes", kafkasink.Config{Brokers: []string{"h"}, MaxRecordBytes: -1}, "MaxRecordBytes", "positive"},
		{"MaxRecordBytesHuge", kafkasink.Config{Brokers: []string{"h"}, MaxRecordBytes: 2 << 30}, "MaxRecordBytes", "at most"},
		{"Compression", kafkasink.Config{Brokers: []string{"h"}, Compression: "brotli"}, "Compression", `is "brotli"`},
		{"NegativeLinger", kafkasink.Config{Brokers: []string{"h"}, Linger: -time.Millisecond}, "Linger", "is -1ms: use a duration up to 1m0s, NoLinger to send at once, or 0 for the default 10ms"},
		{"LongLinger", kafkasink.Config{Brokers: []string{"h"}, Linger: 2 * time.Minute}, "Linger", "is 2m0s"},
		{"DeliveryTimeout", kafkasink.Config{Brokers: []string{"h"}, DeliveryTimeout: -1}, "DeliveryTimeout", "positive"},
		{"DeliveryTimeoutShort", kafkasink.Config{Brokers: []string{"h"}, DeliveryTimeout: time.Millisecond}, "DeliveryTimeout", "at least 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := kafkasink.New(t.Context(), tc.cfg)
			require.Nil(t, s)
			configtest.RequireError(t, err, tc.field, tc.text, pw)
		})
	}
}

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	c := kafkasink.Config{}.WithDefaults()
	require.NotNil(t, c.Router)
	require.Equal(t, kafkasink.SourceDefault, c.Source)
	require.Equal(t, kafkasink.ClientIDDefault, c.ClientID)
	require.Equal(t, kafkasink.ConnectTimeoutDefault, c.ConnectTimeout)
	require.Equal(t, kafkasink.MaxRecordBytesDefault, c.MaxRecordBytes)
	require.Equal(t, kafkasink.CompressionDefault, c.Compression)
	require.Zero(t, c.DeliveryTimeout, "bounded by Publish's context")
	require.Equal(t, kafkasink.LingerDefault, c.Linger)
	require.NotNil(t, c.Logger)
	e := outbox.Event{EventType: "created", AggregateType: "order"}
	require.Equal(t, "order.created", c.Router.Route(&e), "the default route")
}

func TestStringsHideThePassword(t *testing.T) {
	t.Parallel()
	const pw = "pw-hunter2"
	cfg := kafkasink.Config{Brokers: []string{"h:9092"}, SASL: kafkasink.SASLPlain, User: "u", Password: pw}
	for _, text := range append(configtest.Printed(cfg), cfg.LogValue().String()) {
		require.NotContains(t, text, pw)
	}
	require.Contains(t, cfg.String(), "[REDACTED]")
}

// TestLinger checks that Config.Linger reaches the producer: a lone record
// is sent at once with NoLinger, and waits out a long linger (here longer
// than Publish's context) when one is set.
func TestLinger(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := c.topic(t, 1)

	cfg := c.config(t, topic)
	cfg.Linger = kafkasink.NoLinger
	s := newSink(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.Nil(t, s.Publish(ctx, []outbox.Event{sinktest.NewEvent("x", `{}`)}), "no linger: the record goes at once")

	cfg = c.config(t, topic)
	cfg.Linger = kafkasink.LingerMax
	s = newSink(t, cfg)
	ctx, cancel = context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	errs := s.Publish(ctx, []outbox.Event{sinktest.NewEvent("x", `{}`)})
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs[0], context.DeadlineExceeded, "the record lingers past Publish's context")
}
