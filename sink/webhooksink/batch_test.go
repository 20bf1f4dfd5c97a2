package webhooksink_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/webhooksink"
	"github.com/outboxkit/outbox/sinktest"
)

// batchEvent is one event of a CloudEvents JSON batch as a receiver reads it.
type batchEvent struct {
	SpecVersion string          `json:"specversion"`
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Source      string          `json:"source"`
	Subject     string          `json:"subject"`
	Time        string          `json:"time"`
	ContentType string          `json:"datacontenttype"`
	Aggregate   string          `json:"aggregatetype"`
	Tenant      string          `json:"xtenant"`
	TraceParent string          `json:"traceparent"`
	Data        json.RawMessage `json:"data"`
}

// batchOf decodes a batched request's body, failing the test unless it is
// one.
func batchOf(t *testing.T, r received) []batchEvent {
	t.Helper()
	require.Equal(t, webhooksink.BatchContentType, r.Header.Get("Content-Type"))
	var evs []batchEvent
	require.NoError(t, json.Unmarshal(r.Body, &evs), "the body is a JSON array of events")
	return evs
}

// batchIDs lists the event IDs of a batched request.
func batchIDs(t *testing.T, r received) []string {
	t.Helper()
	var ids []string
	for _, e := range batchOf(t, r) {
		ids = append(ids, e.ID)
	}
	return ids
}

func TestConformanceBatched(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(t *testing.T) sinktest.Harness {
		srv := newServer(t)
		return sinktest.Harness{
			Sink: newSink(t, srv, webhooksink.Config{Concurrency: 4, Batch: 3}),
			Delivered: func(t *testing.T) []sinktest.Delivery {
				var ds []sinktest.Delivery
				for _, r := range srv.received() {
					for _, e := range batchOf(t, r) {
						id, err := strconv.ParseInt(e.ID, 10, 64)
						require.NoError(t, err)
						ds = append(ds, sinktest.Delivery{ID: id, EventType: e.Type, Payload: e.Data})
					}
				}
				return ds
			},
			Stall: func(*testing.T) (<-chan struct{}, func()) {
				stalled, release := make(chan struct{}, 1), make(chan struct{})
				srv.setRespond(func(w http.ResponseWriter, r *http.Request) {
					select {
					case stalled <- struct{}{}:
					default:
					}
					select {
					case <-release:
					case <-r.Context().Done():
					}
				})
				var once sync.Once
				return stalled, func() { once.Do(func() { close(release) }) }
			},
			Fail: func(*testing.T) { srv.answer(http.StatusServiceUnavailable, "maintenance") },
			Unreachable: func(t *testing.T) outbox.Sink {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				addr := l.Addr().String()
				require.NoError(t, l.Close())
				return newSink(t, srv, webhooksink.Config{URL: "http://" + addr + "/hooks/outbox", Batch: 3})
			},
			Reject: func(t *testing.T, e *outbox.Event) {
				id := itoa(e.ID)
				srv.setRespond(answerBatchesWith(t, id, http.StatusUnprocessableEntity))
			},
		}
	})
}

// answerBatchesWith answers code to every request whose batch holds the
// event id, 204 to the others.
func answerBatchesWith(t *testing.T, id string, code int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		if slices.Contains(batchIDs(t, received{Header: r.Header, Body: body}), id) {
			w.WriteHeader(code)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

func TestBatchedRequestsCarryCloudEventsBatches(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	s := newSink(t, srv, webhooksink.Config{Batch: 10, Secret: secret, Headers: map[string]string{"Authorization": "Bearer t0ken"}})
	events := make([]outbox.Event, 25)
	for i := range events {
		events[i] = fullEvent()
		events[i].ID = int64(1000 + i)
	}
	require.Nil(t, s.Publish(t.Context(), events))

	got := srv.received()
	require.Len(t, got, 3, "25 events in requests of up to 10")
	verifier, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	seen := map[string]int{}
	for _, r := range got {
		require.Equal(t, "Bearer t0ken", r.Header.Get("Authorization"))
		require.NoError(t, verifier.Verify(r.Body, r.Header), "each request is signed over its whole body")
		evs := batchOf(t, r)
		require.Equal(t, evs[0].ID+"-"+evs[len(evs)-1].ID, r.Header.Get("webhook-id"))
		for _, e := range evs {
			seen[e.ID]++
			require.Equal(t, batchEvent{
				SpecVersion: "1.0", ID: e.ID, Type: "order.created", Source: "/outbox", Subject: "o-42",
				Time: "2024-05-06T05:08:09.123456789Z", ContentType: "application/json", Aggregate: "order",
				Tenant: "acme", TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				Data: json.RawMessage(`{"total": 12.50, "items":[1,2]}`),
			}, e, "the payload is embedded byte for byte as data")
		}
	}
	for i := range events {
		require.Equal(t, 1, seen[itoa(events[i].ID)], "event %d sent once", events[i].ID)
	}
}

func TestBatchRefusedIsSplitSoOneBadEventFailsAlone(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	s := newSink(t, srv, webhooksink.Config{Batch: 5})
	events := make([]outbox.Event, 10)
	for i := range events {
		events[i] = sinktest.NewEvent("order.created", `{"n":1}`)
	}
	bad := events[3]
	srv.setRespond(answerBatchesWith(t, itoa(bad.ID), http.StatusUnprocessableEntity))
	errs := s.Publish(t.Context(), events)
	require.Len(t, errs, len(events))
	for i, err := range errs {
		if events[i].ID == bad.ID {
			require.True(t, outbox.IsPermanent(err), "the rejected event is dead-lettered: %v", err)
			var se *webhooksink.StatusError
			require.ErrorAs(t, err, &se)
			require.Equal(t, bad.ID, se.EventID)
			continue
		}
		require.NoError(t, err, "event %d shared a refused request with the bad one but is delivered alone", events[i].ID)
	}
	// One request per batch of 5, then the refused one's 5 events alone.
	require.Len(t, srv.received(), 2+5)
}

func TestBatchRetryableAnswerFailsItsRequest(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	s := newSink(t, srv, webhooksink.Config{Batch: 4})
	events := make([]outbox.Event, 8)
	for i := range events {
		events[i] = sinktest.NewEvent("order.created", `{"n":1}`)
	}
	srv.setRespond(answerBatchesWith(t, itoa(events[5].ID), http.StatusServiceUnavailable))
	errs := s.Publish(t.Context(), events)
	for i, err := range errs {
		if i < 4 {
			require.NoError(t, err)
			continue
		}
		require.Error(t, err, "event %d was in the request answered 503", events[i].ID)
		require.False(t, outbox.IsPermanent(err), "a 503 is retried: %v", err)
		require.Contains(t, err.Error(), "event "+itoa(events[i].ID)+":")
	}
	require.Len(t, srv.received(), 2, "a retryable answer is not split")
}

func TestBatchConfig(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, webhooksink.BatchMax + 1} {
		_, err := webhooksink.New(webhooksink.Config{URL: "http://127.0.0.1/x", Batch: n})
		var ce *outbox.ConfigError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "Batch", ce.Field)
	}
}
