package stdoutsink_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/stdoutsink"
	"github.com/outboxkit/outbox/sinktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is an io.Writer that keeps what it was given, counts Write
// calls and can be told to fail.
type recorder struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
	err    error
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return 0, r.err
	}
	r.writes++
	return r.buf.Write(p)
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

func (r *recorder) Writes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes
}

// lines returns the written lines, failing the test on any line that is
// not a JSON object.
func (r *recorder) lines(t *testing.T) []map[string]json.RawMessage {
	t.Helper()
	var out []map[string]json.RawMessage
	sc := bufio.NewScanner(strings.NewReader(r.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "every line is a JSON object: %q", sc.Text())
		out = append(out, m)
	}
	require.NoError(t, sc.Err())
	return out
}

type bundle struct {
	sink *stdoutsink.Sink
	out  *recorder
}

func setup(t *testing.T) bundle {
	t.Helper()
	out := &recorder{}
	return bundle{sink: stdoutsink.New(out), out: out}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(t *testing.T) sinktest.Harness {
		b := setup(t)
		return sinktest.Harness{
			Sink: b.sink,
			Delivered: func(t *testing.T) []sinktest.Delivery {
				var ds []sinktest.Delivery
				for _, l := range b.out.lines(t) {
					var d sinktest.Delivery
					require.NoError(t, json.Unmarshal(l["id"], &d.ID))
					require.NoError(t, json.Unmarshal(l["event_type"], &d.EventType))
					d.Payload = l["payload"]
					ds = append(ds, d)
				}
				return ds
			},
			Fail: func(*testing.T) { b.out.fail(errors.New("disk full")) },
			// A payload that is not JSON fails to encode, before the write.
			Reject: func(_ *testing.T, e *outbox.Event) { e.Payload = json.RawMessage(`{"n":`) },
		}
	})
}

func TestLineHasEveryField(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.FixedZone("CEST", 2*3600))
	e := outbox.Event{
		ID: 42, EventType: "order.created", AggregateType: "order", AggregateID: "o-1",
		Payload:        json.RawMessage(`{"total":12.50,"html":"<b>&</b>"}`),
		Headers:        map[string]string{"correlation_id": "c-1", "tenant": "acme"},
		IdempotencyKey: "order:o-1:order.created:2024-05-06",
		Attempts:       2, Status: outbox.StatusProcessing, LastError: "boom", LockedBy: "relay-1",
		CreatedAt: created, AvailableAt: created.Add(time.Second),
	}
	require.Nil(t, b.sink.Publish(t.Context(), []outbox.Event{e}))
	require.Equal(t,
		`{"id":42,"event_type":"order.created","aggregate_type":"order","aggregate_id":"o-1",`+
			`"payload":{"total":12.50,"html":"<b>&</b>"},"headers":{"correlation_id":"c-1","tenant":"acme"},`+
			`"attempts":2,"idempotency_key":"order:o-1:order.created:2024-05-06",`+
			`"created_at":"2024-05-06T05:08:09.123456789Z","available_at":"2024-05-06T05:08:10.123456789Z"}`+"\n",
		b.out.String())
}

func TestLineCarriesTheTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := outbox.Event{ID: 7, Tenant: "s_acme", Database: "db1:5432/app", EventType: "x", Payload: json.RawMessage(`{}`)}
	require.Nil(t, b.sink.Publish(t.Context(), []outbox.Event{e}))
	require.Equal(t, `{"id":7,"tenant":"s_acme","database":"db1:5432/app","event_type":"x","payload":{}}`+"\n", b.out.String())
}

func TestLineOmitsEmptyOptionalFields(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Nil(t, b.sink.Publish(t.Context(), []outbox.Event{
		{ID: 1, EventType: "ping", Payload: json.RawMessage(`{}`)},
		{ID: 2, EventType: "ping", Headers: map[string]string{}},
	}))
	require.Equal(t,
		`{"id":1,"event_type":"ping","payload":{}}`+"\n"+
			`{"id":2,"event_type":"ping","payload":null}`+"\n",
		b.out.String())
}

func TestPayloadWhitespaceIsCompactedOntoOneLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Nil(t, b.sink.Publish(t.Context(), []outbox.Event{
		{ID: 1, EventType: "a", Payload: json.RawMessage("{\n  \"a\": [1, 2],\n  \"s\": \"x y\"\n}")},
	}))
	require.Equal(t, `{"id":1,"event_type":"a","payload":{"a":[1,2],"s":"x y"}}`+"\n", b.out.String())
}

func TestInvalidPayloadFailsOnlyThatEventPermanently(t *testing.T) {
	t.Parallel()
	b := setup(t)
	errs := b.sink.Publish(t.Context(), []outbox.Event{
		{ID: 1, EventType: "a", Payload: json.RawMessage(`{"ok":true}`)},
		{ID: 2, EventType: "a", Payload: json.RawMessage(`{"broken":`)},
		{ID: 3, EventType: "a", Payload: json.RawMessage(`[3]`)},
	})
	require.Len(t, errs, 3)
	require.NoError(t, errs[0])
	require.Error(t, errs[1])
	require.True(t, outbox.IsPermanent(errs[1]), "bad JSON never gets better on retry")
	require.Contains(t, errs[1].Error(), "event 2")
	require.Contains(t, errs[1].Error(), "valid JSON")
	require.NoError(t, errs[2])
	lines := b.out.lines(t)
	require.Len(t, lines, 2)
	require.JSONEq(t, `1`, string(lines[0]["id"]))
	require.JSONEq(t, `3`, string(lines[1]["id"]))
}

func TestAllPayloadsInvalidWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	errs := b.sink.Publish(t.Context(), []outbox.Event{{ID: 1, EventType: "a", Payload: json.RawMessage(`nope`)}})
	require.Len(t, errs, 1)
	require.True(t, outbox.IsPermanent(errs[0]))
	require.Zero(t, b.out.Writes())
}

func TestWriteErrorFailsWholeBatchRetryably(t *testing.T) {
	t.Parallel()
	b := setup(t)
	diskFull := errors.New("disk full")
	b.out.fail(diskFull)
	errs := b.sink.Publish(t.Context(), []outbox.Event{
		{ID: 1, EventType: "a", Payload: json.RawMessage(`1`)},
		{ID: 2, EventType: "a", Payload: json.RawMessage(`{`)},
		{ID: 3, EventType: "a", Payload: json.RawMessage(`3`)},
	})
	require.Len(t, errs, 3)
	for _, i := range []int{0, 2} {
		require.ErrorIs(t, errs[i], diskFull)
		require.False(t, outbox.IsPermanent(errs[i]))
		require.Contains(t, errs[i].Error(), "stdoutsink: write batch of 3 events")
	}
	require.True(t, outbox.IsPermanent(errs[1]), "the encode error is kept; it is the real reason")
}

func TestOneWritePerBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events := make([]outbox.Event, 50)
	for i := range events {
		events[i] = sinktest.NewEvent("a", `{"i":1}`)
	}
	require.Nil(t, b.sink.Publish(t.Context(), events))
	require.Equal(t, 1, b.out.Writes())
	require.Len(t, b.out.lines(t), 50)
}

func TestCancelledContextWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	errs := b.sink.Publish(ctx, []outbox.Event{sinktest.NewEvent("a", `1`), sinktest.NewEvent("a", `2`)})
	require.Len(t, errs, 2)
	for _, err := range errs {
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, outbox.IsPermanent(err))
	}
	require.Zero(t, b.out.Writes())
}
