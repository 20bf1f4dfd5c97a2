package webhooksink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/sink/webhooksink"
)

// The inbox's webhook receiver verifies exactly what this sink signs, with
// a whsec_ secret and with a raw one, and reads the event's attributes
// from the CloudEvents headers.
func TestInboxWebhookHandlerVerifiesTheSink(t *testing.T) {
	t.Parallel()
	for _, secret := range []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "a raw shared secret"} {
		var (
			mu   sync.Mutex
			got  []inbox.Message
			seen = map[string]bool{}
		)
		h, err := inbox.NewWebhookHandler(inbox.WebhookConfig{Secret: secret,
			Receive: func(_ context.Context, m inbox.Message) (inbox.Result, error) {
				mu.Lock()
				defer mu.Unlock()
				if seen[m.Source+" "+m.ID] {
					return inbox.Result{Duplicate: true}, nil
				}
				seen[m.Source+" "+m.ID] = true
				got = append(got, m)
				return inbox.Result{}, nil
			}})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		sink, err := webhooksink.New(webhooksink.Config{URL: srv.URL + "/hooks", Secret: secret, Source: "/shop/eu"})
		require.NoError(t, err)
		created := time.Date(2026, 12, 4, 10, 0, 0, 123456789, time.UTC)
		events := []outbox.Event{
			{ID: 41, EventType: "order.created", AggregateType: "order", AggregateID: "o-1", Payload: json.RawMessage(`{"total": 12.5}`),
				Headers: map[string]string{"correlation_id": "réq 1"}, CreatedAt: created},
			{ID: 42, EventType: "order.paid", Payload: json.RawMessage(`{}`), CreatedAt: created},
		}
		require.Nil(t, sink.Publish(context.Background(), events))
		require.Nil(t, sink.Publish(context.Background(), events[:1]), "a redelivery answers 2xx")
		require.NoError(t, sink.Close())
		srv.Close()

		require.Len(t, got, 2)
		byID := map[string]inbox.Message{got[0].ID: got[0], got[1].ID: got[1]}
		m := byID["41"]
		require.Equal(t, "/shop/eu", m.Source)
		require.Equal(t, "order.created", m.EventType)
		require.JSONEq(t, `{"total": 12.5}`, string(m.Payload))
		require.Equal(t, "réq 1", m.Headers["correlationid"])
		require.Equal(t, "o-1", m.Headers["subject"])
		require.Equal(t, "order", m.Headers["aggregatetype"])
		require.True(t, created.Equal(m.Time))
	}
}

// A receiver with another secret refuses the sink's requests with 401,
// which the sink reports as a permanent error.
func TestInboxWebhookHandlerRefusesAnotherSecret(t *testing.T) {
	t.Parallel()
	h, err := inbox.NewWebhookHandler(inbox.WebhookConfig{Secret: "receiver secret",
		Receive: func(context.Context, inbox.Message) (inbox.Result, error) {
			t.Error("an unverified message reached Receive")
			return inbox.Result{}, nil
		}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	sink, err := webhooksink.New(webhooksink.Config{URL: srv.URL, Secret: "sender secret"})
	require.NoError(t, err)
	defer func() { _ = sink.Close() }()
	errs := sink.Publish(context.Background(), []outbox.Event{{ID: 1, EventType: "x", Payload: json.RawMessage(`{}`)}})
	require.Len(t, errs, 1)
	var se *webhooksink.StatusError
	require.ErrorAs(t, errs[0], &se)
	require.Equal(t, 401, se.StatusCode)
	require.True(t, outbox.IsPermanent(errs[0]))
}

// The batched mode's requests (CloudEvents batches) reach the inbox as one
// message per event, keyed on each event's own id: a redelivery batched
// differently stores nothing twice, and each event keeps its attributes.
func TestInboxWebhookHandlerUnpacksBatches(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	var (
		mu   sync.Mutex
		got  = map[string]inbox.Message{}
		dups int
	)
	h, err := inbox.NewWebhookHandler(inbox.WebhookConfig{Secret: secret,
		Receive: func(_ context.Context, m inbox.Message) (inbox.Result, error) {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := got[m.Source+" "+m.ID]; ok {
				dups++
				return inbox.Result{Duplicate: true}, nil
			}
			got[m.Source+" "+m.ID] = m
			return inbox.Result{}, nil
		}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	events := make([]outbox.Event, 12)
	for i := range events {
		events[i] = outbox.Event{ID: int64(100 + i), EventType: "order.created", AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", i),
			Payload: json.RawMessage(fmt.Sprintf(`{"n": %d}`, i)), CreatedAt: time.Now()}
	}
	for _, batch := range []int{5, 7} {
		sink, err := webhooksink.New(webhooksink.Config{URL: srv.URL, Secret: secret, Source: "/shop/eu", Batch: batch})
		require.NoError(t, err)
		require.Nil(t, sink.Publish(context.Background(), events))
		require.NoError(t, sink.Close())
	}
	require.Len(t, got, len(events), "one message per event")
	require.Equal(t, len(events), dups, "the redelivery batched differently stored nothing")
	for i, e := range events {
		m, ok := got["/shop/eu "+strconv.FormatInt(e.ID, 10)]
		require.True(t, ok, "event %d", e.ID)
		require.Equal(t, "order.created", m.EventType)
		require.JSONEq(t, fmt.Sprintf(`{"n": %d}`, i), string(m.Payload))
		require.Equal(t, fmt.Sprintf("o-%d", i), m.Headers["subject"])
	}
}
