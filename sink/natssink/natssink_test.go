package natssink_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/internal/testutil/configtest"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/natssink"
	"github.com/outboxkit/outbox/sinktest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(t *testing.T) sinktest.Harness {
		b := newBroker(t)
		proxy := tcpproxy.Start(t, natsAddr())
		cfg := b.config(t)
		cfg.Servers = []string{proxy.Addr()}
		cfg.AckTimeout = 2 * time.Second
		cfg.ReconnectWait = 20 * time.Millisecond
		s := newSink(t, cfg)
		return sinktest.Harness{
			Sink:      s,
			Delivered: sinktest.DeliveriesOf(b.reader(t)),
			// A stream that receives but never acknowledges: the stream
			// gives up the subjects to a subscriber that never answers.
			Stall: func(t *testing.T) (<-chan struct{}, func()) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := b.js.UpdateStream(ctx, jetstream.StreamConfig{
					Name: b.stream, Subjects: []string{"x" + b.prefix + ".>"}, Storage: jetstream.MemoryStorage, Duplicates: time.Minute,
				})
				require.NoError(t, err)
				stalled := make(chan struct{}, 1)
				sub, err := b.nc.Subscribe(b.prefix+".>", func(*nats.Msg) {
					select {
					case stalled <- struct{}{}:
					default:
					}
				})
				require.NoError(t, err)
				require.NoError(t, b.nc.Flush())
				var once sync.Once
				return stalled, func() { once.Do(func() { _ = sub.Unsubscribe() }) }
			},
			Fail: func(*testing.T) { proxy.Refuse() },
			Unreachable: func(*testing.T) outbox.Sink {
				proxy.Refuse()
				return s
			},
			// Larger than the stream takes: the server refuses that
			// message and stores the ones behind it.
			Reject: func(t *testing.T, e *outbox.Event) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := b.js.UpdateStream(ctx, jetstream.StreamConfig{
					Name: b.stream, Subjects: []string{b.prefix + ".>"}, Storage: jetstream.MemoryStorage, Duplicates: time.Minute,
					MaxMsgSize: 8 << 10,
				})
				require.NoError(t, err)
				e.Payload = json.RawMessage(`{"blob":"` + strings.Repeat("x", 16<<10) + `"}`)
			},
		}
	})
}

func TestMessageCarriesCloudEventsHeaders(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	cfg := b.config(t)
	cfg.Source = "https://shop.example.com/orders"
	s := newSink(t, cfg)
	e := brokertest.FullEvent(4711, "X-Note", `zoë says "100%"`)
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))

	msgs := b.messages(t, 1)
	require.Len(t, msgs, 1)
	m := msgs[0]
	require.Equal(t, b.prefix+".order.created", m.Subject)
	require.Equal(t, string(e.Payload), string(m.Data), "the data is the payload exactly as stored")
	want := map[string]string{
		"ce-specversion":     "1.0",
		"ce-id":              "4711",
		"ce-type":            "order.created",
		"ce-source":          "https://shop.example.com/orders",
		"ce-subject":         "o-42",
		"ce-time":            "2024-05-06T05:08:09.123456789Z",
		"ce-datacontenttype": "application/json",
		"ce-aggregatetype":   "order",
		"ce-correlationid":   "corr-1",
		"ce-causationid":     "cause-1",
		"ce-schemaversion":   "2",
		"ce-xnote":           "zo%C3%AB%20says%20%22100%25%22",
		"traceparent":        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":         "vendor=abc",
		"Nats-Msg-Id":        "4711",
	}
	got := map[string]string{}
	for name, values := range m.Header {
		require.Len(t, values, 1, "header %s", name)
		got[name] = values[0]
	}
	require.Equal(t, want, got, "exactly the binary-mode CloudEvents headers, the trace context and the dedup ID")
}

func TestOptionalAttributesAreLeftOut(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	s := newSink(t, b.config(t))
	e := outbox.Event{ID: 7, EventType: "ping", Payload: json.RawMessage(`{}`)}
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))
	m := b.messages(t, 1)[0]
	require.Equal(t, b.prefix+".ping", m.Subject)
	for _, absent := range []string{"ce-subject", "ce-aggregatetype", "ce-time", "traceparent", "tracestate", "Content-Type"} {
		require.Empty(t, m.Header.Values(absent), "header %s", absent)
	}
	require.Equal(t, "7", m.Header.Get("ce-id"))
	require.Equal(t, "7", m.Header.Get(jetstream.MsgIDHeader))
}

func TestInvalidSubjectFailsOnlyItsEvent(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	s := newSink(t, b.config(t))
	bad := map[string]string{
		"Space":            b.prefix + ".has space",
		"Tab":              b.prefix + ".a\tb",
		"Star":             b.prefix + ".*",
		"GreaterThan":      b.prefix + ".a.>",
		"EmptyToken":       b.prefix + "..a",
		"LeadingDot":       "." + b.prefix,
		"TrailingDot":      b.prefix + ".",
		"SystemSubject":    "$JS.API.STREAM.DELETE." + b.stream,
		"ControlCharacter": b.prefix + ".a\x00",
	}
	var events []outbox.Event
	var names []string
	for name, subject := range bad {
		e := sinktest.NewEvent("poison", `{}`)
		e.Headers = map[string]string{route.Header: subject}
		events = append(events, e)
		names = append(names, name)
	}
	good := sinktest.NewEvent("fine", `{"ok":true}`)
	events = append(events, good)

	errs := s.Publish(t.Context(), events)
	require.Len(t, errs, len(events))
	for i, name := range names {
		require.Error(t, errs[i], name)
		require.True(t, outbox.IsPermanent(errs[i]), "%s: an invalid subject cannot be fixed by retrying: %v", name, errs[i])
		require.Contains(t, errs[i].Error(), "subject", name)
	}
	require.NoError(t, errs[len(errs)-1], "the valid event of the batch is delivered")

	// A template that renders empty.
	cfg := b.config(t)
	cfg.Router = mustRouter(t, "{header.empty}")
	emptyRouted := newSink(t, cfg)
	errs = emptyRouted.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("x", `{}`)})
	require.Len(t, errs, 1)
	require.True(t, outbox.IsPermanent(errs[0]))
	require.Contains(t, errs[0].Error(), "is empty")

	require.Equal(t, uint64(1), b.count(t), "only the valid event reached the stream")
	// The system subject was refused: the stream still exists.
	msgs := b.messages(t, 1)
	require.Equal(t, b.prefix+".fine", msgs[0].Subject)
}

func TestNoStreamIsPermanentAndNamesTheSubject(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	cfg := b.config(t)
	cfg.NoStreamRetries = -1
	s := newSink(t, cfg)
	orphan := sinktest.NewEvent("orphan", `{}`)
	orphan.Headers = map[string]string{route.Header: "nostream" + b.prefix + ".orphan"}
	good := sinktest.NewEvent("kept", `{}`)
	errs := s.Publish(t.Context(), []outbox.Event{orphan, good})
	require.Len(t, errs, 2)
	require.ErrorIs(t, errs[0], natssink.ErrNoStream)
	require.True(t, outbox.IsPermanent(errs[0]))
	require.Contains(t, errs[0].Error(), `"nostream`+b.prefix+`.orphan"`)
	require.Contains(t, errs[0].Error(), "add the subject to a stream")
	require.NoError(t, errs[1])
	require.Equal(t, uint64(1), b.count(t))
}

func TestOversizeMessageIsPermanent(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	s := newSink(t, b.config(t))
	huge := sinktest.NewEvent("huge", `"`+strings.Repeat("x", 2<<20)+`"`) // over the default max_payload of 1 MiB
	good := sinktest.NewEvent("fine", `{}`)
	errs := s.Publish(t.Context(), []outbox.Event{huge, good})
	require.Len(t, errs, 2)
	require.True(t, outbox.IsPermanent(errs[0]), "%v", errs[0])
	require.ErrorIs(t, errs[0], nats.ErrMaxPayload)
	require.Contains(t, errs[0].Error(), "max_payload")
	require.NoError(t, errs[1])
	require.Equal(t, uint64(1), b.count(t))
}

func TestStreamRejectionIsPermanent(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := b.js.UpdateStream(ctx, jetstream.StreamConfig{
		Name: b.stream, Subjects: []string{b.prefix + ".>"}, Storage: jetstream.MemoryStorage, Duplicates: time.Minute,
		MaxMsgSize: 512,
	})
	require.NoError(t, err)
	s := newSink(t, b.config(t))
	big := sinktest.NewEvent("big", `"`+strings.Repeat("y", 1000)+`"`)
	small := sinktest.NewEvent("small", `{}`)
	errs := s.Publish(t.Context(), []outbox.Event{big, small})
	require.Len(t, errs, 2)
	require.True(t, outbox.IsPermanent(errs[0]), "%v", errs[0])
	var apiErr *jetstream.APIError
	require.ErrorAs(t, errs[0], &apiErr)
	require.Equal(t, jetstream.JSErrCodeStreamMessageExceedsMaximum, apiErr.ErrorCode)
	require.NoError(t, errs[1])
}

func TestExpectedStreamMismatchIsPermanent(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	other := newBroker(t)
	cfg := b.config(t)
	cfg.Stream = other.stream // exists, but b's subjects land in b.stream
	s := newSink(t, cfg)
	errs := s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("astray", `{}`)})
	require.Len(t, errs, 1)
	require.True(t, outbox.IsPermanent(errs[0]), "%v", errs[0])
	require.Zero(t, b.count(t))
}

func TestDuplicateIDsAreDroppedByJetStream(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	s := newSink(t, b.config(t))
	events := []outbox.Event{sinktest.NewEvent("dup", `{"n":1}`), sinktest.NewEvent("dup", `{"n":2}`)}
	for range 3 {
		require.Nil(t, s.Publish(t.Context(), events), "a re-published event is acknowledged (as a duplicate)")
	}
	require.Equal(t, uint64(2), b.count(t))
}

func TestConnectionLossIsRetryableAndTheSinkReconnects(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	proxy := tcpproxy.Start(t, natsAddr())
	cfg := b.config(t)
	cfg.Servers = []string{proxy.Addr()}
	cfg.ReconnectWait = 20 * time.Millisecond
	cfg.AckTimeout = time.Second
	s := newSink(t, cfg)
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("before", `{}`)}))

	proxy.Refuse()
	errs := s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("during", `{}`)})
	require.Len(t, errs, 1)
	require.Error(t, errs[0])
	require.False(t, outbox.IsPermanent(errs[0]), "an outage is retryable: %v", errs[0])

	proxy.Allow()
	var last []error
	deadline := time.Now().Add(10 * time.Second)
	for {
		last = s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("after", `{}`)})
		if last == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling for the client's reconnect
	}
	require.Nil(t, last, "the sink publishes again once the server is back")
	require.GreaterOrEqual(t, proxy.Accepted(), 2, "the client reconnected through the proxy")
}

func TestPublishAfterCloseIsRetryable(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	s := newSink(t, b.config(t))
	brokertest.PublishAfterClose(t, s)
}

func TestLargeBatchBeyondMaxPending(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	cfg := b.config(t)
	cfg.MaxPending = 16
	s := newSink(t, cfg)
	events := make([]outbox.Event, 500)
	for i := range events {
		events[i] = sinktest.NewEvent("bulk", `{"i":`+strconv.Itoa(i)+`}`)
	}
	require.Nil(t, s.Publish(t.Context(), events), "a batch larger than MaxPending waits for room")
	require.Equal(t, uint64(500), b.count(t))
}

func TestBatchIsSentBeforeAnyAck(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	// The stream gives up its subjects to a subscriber that counts what
	// arrives and never acknowledges: a sink that waited for each ack
	// before sending the next message would deliver only one.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := b.js.UpdateStream(ctx, jetstream.StreamConfig{
		Name: b.stream, Subjects: []string{"x" + b.prefix + ".>"}, Storage: jetstream.MemoryStorage,
	})
	require.NoError(t, err)
	var (
		mu       sync.Mutex
		received int
	)
	sub, err := b.nc.Subscribe(b.prefix+".>", func(*nats.Msg) {
		mu.Lock()
		received++
		mu.Unlock()
	})
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, b.nc.Flush())

	s := newSink(t, b.config(t))
	const n = 50
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = sinktest.NewEvent("async", `{}`)
	}
	pubCtx, cancelPub := context.WithCancel(t.Context())
	done := make(chan []error, 1)
	go func() { done <- s.Publish(pubCtx, events) }()
	testutil.WaitFor(t, 10*time.Second, "every message of the batch to be sent while none is acknowledged", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return received == n
	})
	cancelPub()
	errs := <-done
	require.Len(t, errs, n)
	for _, err := range errs {
		require.Error(t, err)
		require.False(t, outbox.IsPermanent(err))
	}
}

func TestNewFailsInOneLine(t *testing.T) {
	t.Parallel()
	const pw = "s3cret-pass"
	proxy := tcpproxy.Start(t, natsAddr())
	proxy.Refuse()
	for _, tc := range []struct {
		name string
		cfg  natssink.Config
		text string
	}{
		{"Unreachable", natssink.Config{Servers: []string{proxy.Addr()}, User: "u", Password: pw, ConnectTimeout: time.Second}, "cannot connect to nats://" + proxy.Addr()},
		{"MissingStream", natssink.Config{Servers: []string{natsAddr()}, Stream: "OUTBOX_TEST_MISSING_" + strings.ToUpper(brokertest.RandomName())}, "does not exist: create it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.cfg.Logger = quiet
			s, err := natssink.New(t.Context(), tc.cfg)
			require.Nil(t, s)
			brokertest.RequireConnectError(t, err, pw, tc.text)
		})
	}
}

func TestNewCreatesTheStream(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	id := brokertest.RandomName()
	name := "OUTBOX_TEST_CREATED_" + strings.ToUpper(id)
	t.Cleanup(func() { deleteStream(t, js, name) })
	cfg := natssink.Config{
		Servers: []string{natsAddr()}, Logger: quiet,
		Stream: name, CreateStream: true, StreamSubjects: []string{"c" + id + ".>"},
		DuplicateWindow: 90 * time.Second,
		Router:          mustRouter(t, "c"+id+".{event_type}"),
	}
	s := newSink(t, cfg)
	s2 := newSink(t, cfg) // the stream exists now: left as it is
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("made", `{}`)}))
	require.Nil(t, s2.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("made", `{}`)}))

	stream, err := js.Stream(t.Context(), name)
	require.NoError(t, err)
	info, err := stream.Info(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{"c" + id + ".>"}, info.Config.Subjects)
	require.Equal(t, 90*time.Second, info.Config.Duplicates)
	require.Equal(t, jetstream.FileStorage, info.Config.Storage)
	require.Equal(t, uint64(2), info.State.Msgs)
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	const pw = "hunter2-password"
	for _, tc := range []struct {
		name  string
		cfg   natssink.Config
		field string
		text  string
	}{
		{"NoServers", natssink.Config{}, "Servers", "is empty"},
		{"EmptyServer", natssink.Config{Servers: []string{""}}, "Servers", "entry 0: is empty"},
		{"CredentialsInServer", natssink.Config{Servers: []string{"nats://u:" + pw + "@h:4222"}}, "Servers", "holds credentials"},
		{"Scheme", natssink.Config{Servers: []string{"http://h:4222"}}, "Servers", `has scheme "http"`},
		{"Path", natssink.Config{Servers: []string{"nats://h:4222/x"}}, "Servers", "has a path"},
		{"TokenAndUser", natssink.Config{Servers: []string{"h"}, Token: pw, User: "u"}, "Token", "either a token"},
		{"PasswordWithoutUser", natssink.Config{Servers: []string{"h"}, Password: pw}, "User", "is empty but Password is set"},
		{"CredsAndUser", natssink.Config{Servers: []string{"h"}, CredsFile: "x.creds", User: "u"}, "CredsFile", "one way"},
		{"Source", natssink.Config{Servers: []string{"h"}, Source: "a b"}, "Source", "not a URI reference"},
		{"CreateWithoutStream", natssink.Config{Servers: []string{"h"}, CreateStream: true}, "Stream", "name the stream"},
		{"CreateWithoutSubjects", natssink.Config{Servers: []string{"h"}, CreateStream: true, Stream: "S"}, "StreamSubjects", "is empty"},
		{"StreamName", natssink.Config{Servers: []string{"h"}, Stream: "a.b"}, "Stream", "not a valid stream name"},
		{"StreamSubject", natssink.Config{Servers: []string{"h"}, Stream: "S", CreateStream: true, StreamSubjects: []string{"a..b"}}, "StreamSubjects", "empty token"},
		{"StreamSubjectGT", natssink.Config{Servers: []string{"h"}, Stream: "S", CreateStream: true, StreamSubjects: []string{"a.>.b"}}, "StreamSubjects", "must come last"},
		{"AckTimeout", natssink.Config{Servers: []string{"h"}, AckTimeout: -time.Second}, "AckTimeout", "positive"},
		{"ConnectTimeout", natssink.Config{Servers: []string{"h"}, ConnectTimeout: -time.Second}, "ConnectTimeout", "positive"},
		{"ReconnectWait", natssink.Config{Servers: []string{"h"}, ReconnectWait: -time.Second}, "ReconnectWait", "positive"},
		{"MaxPending", natssink.Config{Servers: []string{"h"}, MaxPending: -1}, "MaxPending", "at least 1"},
		{"DuplicateWindow", natssink.Config{Servers: []string{"h"}, DuplicateWindow: -1}, "DuplicateWindow", "positive"},
		{"NoStreamRetries", natssink.Config{Servers: []string{"h"}, NoStreamRetries: -2}, "NoStreamRetries", "-1 for no retry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := natssink.New(t.Context(), tc.cfg)
			require.Nil(t, s)
			configtest.RequireError(t, err, tc.field, tc.text, pw)
		})
	}
}

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	c := natssink.Config{}.WithDefaults()
	require.NotNil(t, c.Router)
	require.Equal(t, natssink.SourceDefault, c.Source)
	require.Equal(t, natssink.NameDefault, c.Name)
	require.Equal(t, natssink.ConnectTimeoutDefault, c.ConnectTimeout)
	require.Equal(t, natssink.AckTimeoutDefault, c.AckTimeout)
	require.Equal(t, natssink.ReconnectWaitDefault, c.ReconnectWait)
	require.Equal(t, natssink.MaxPendingDefault, c.MaxPending)
	require.Equal(t, natssink.DuplicateWindowDefault, c.DuplicateWindow)
	require.Equal(t, natssink.NoStreamRetriesDefault, c.NoStreamRetries)
	require.NotNil(t, c.Logger)
	e := outbox.Event{EventType: "created", AggregateType: "order"}
	require.Equal(t, "order.created", c.Router.Route(&e), "the default route")
}

func TestStringsHideCredentials(t *testing.T) {
	t.Parallel()
	const pw, token = "pw-hunter2", "tok-hunter2"
	b := newBroker(t)
	cfg := b.config(t)
	cfg.User, cfg.Password = "any", pw // the test server takes any credentials
	s := newSink(t, cfg)
	for _, text := range append(configtest.Printed(cfg),
		s.String(), s.LogValue().String(), cfg.LogValue().String(),
		natssink.Config{Servers: []string{"h"}, Token: token}.String(),
	) {
		require.NotContains(t, text, pw)
		require.NotContains(t, text, token)
	}
	require.Contains(t, cfg.String(), "[REDACTED]")
}

// errorsAreWrapped keeps errors.Is working through the sink's messages.
func TestErrorsWrapTheClientError(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	s := newSink(t, b.config(t))
	require.NoError(t, s.Close())
	errs := s.Publish(t.Context(), []outbox.Event{sinktest.NewEvent("x", `{}`)})
	require.True(t, errors.Is(errs[0], nats.ErrConnectionClosed), "%v", errs[0])
}

func TestHealthAnswersWithoutADeadline(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	s := newSink(t, b.config(t))
	require.NoError(t, s.Health(context.Background()), "a connected sink is healthy, deadline or not")
}

// Two tenants' schemas each have an event 42: JetStream must store both,
// each with its own tenant, and still drop a re-publish of either.
func TestTenantsWithTheSameIDsAreNotDuplicates(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	s := newSink(t, b.config(t))
	acme := sinktest.NewEvent("order.created", `{"t":"acme"}`)
	acme.ID, acme.Tenant = 42, "s_acme"
	globex := acme
	globex.Tenant, globex.Payload = "s_globex", json.RawMessage(`{"t":"globex"}`)
	for range 2 {
		require.Nil(t, s.Publish(t.Context(), []outbox.Event{acme, globex}))
	}
	msgs := b.messages(t, 1)
	require.Len(t, msgs, 2, "one message per tenant, the re-publishes dropped")
	for i, want := range []struct{ tenant, id, data string }{
		{"s_acme", "s_acme:42", `{"t":"acme"}`}, {"s_globex", "s_globex:42", `{"t":"globex"}`},
	} {
		require.Equal(t, want.data, string(msgs[i].Data))
		require.Equal(t, want.tenant, msgs[i].Header.Get("ce-tenant"))
		require.Equal(t, want.id, msgs[i].Header.Get("ce-id"))
		require.Equal(t, want.id, msgs[i].Header.Get(jetstream.MsgIDHeader))
	}
}
