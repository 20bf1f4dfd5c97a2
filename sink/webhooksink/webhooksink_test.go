package webhooksink_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/sink/webhooksink"
	"github.com/outboxkit/outbox/sinktest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(t *testing.T) sinktest.Harness {
		srv := newServer(t)
		return sinktest.Harness{
			Sink: newSink(t, srv, webhooksink.Config{Concurrency: 4}),
			Delivered: func(t *testing.T) []sinktest.Delivery {
				var ds []sinktest.Delivery
				for _, r := range srv.received() {
					id, err := strconv.ParseInt(r.Header.Get("ce-id"), 10, 64)
					require.NoError(t, err)
					ds = append(ds, sinktest.Delivery{ID: id, EventType: r.Header.Get("ce-type"), Payload: r.Body})
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
				// A port nothing listens on: connections are refused.
				l, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				addr := l.Addr().String()
				require.NoError(t, l.Close())
				return newSink(t, srv, webhooksink.Config{URL: "http://" + addr + "/hooks/outbox"})
			},
			Reject: func(_ *testing.T, e *outbox.Event) {
				id := itoa(e.ID)
				srv.setRespond(func(w http.ResponseWriter, r *http.Request) {
					if r.Header.Get("ce-id") == id {
						w.WriteHeader(http.StatusUnprocessableEntity)
						return
					}
					w.WriteHeader(http.StatusNoContent)
				})
			},
		}
	})
}

// fullEvent is an event with every field a request carries.
func fullEvent() outbox.Event {
	e := brokertest.FullEvent(4711, "X-Tenant", "acme")
	e.IdempotencyKey, e.Attempts = "ik", 3
	return e
}

func TestRequestCarriesCloudEventsHeaders(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	s := newSink(t, srv, webhooksink.Config{
		URL:     srv.URL + "/hooks/outbox?tenant=acme",
		Headers: map[string]string{"Authorization": "Bearer t0ken", "X-Env": "test"},
	})
	e := fullEvent()
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))

	r := srv.only(t)
	require.Equal(t, http.MethodPost, r.Method)
	require.Equal(t, "/hooks/outbox", r.Path)
	require.Equal(t, "tenant=acme", r.Query)
	require.Equal(t, string(e.Payload), string(r.Body), "the body is the payload exactly as stored")
	want := map[string]string{
		"Content-Type":     "application/json",
		"Ce-Specversion":   "1.0",
		"Ce-Id":            "4711",
		"Ce-Type":          "order.created",
		"Ce-Source":        "/outbox",
		"Ce-Subject":       "o-42",
		"Ce-Time":          "2024-05-06T05:08:09.123456789Z",
		"Ce-Aggregatetype": "order",
		"Ce-Correlationid": "corr-1",
		"Ce-Causationid":   "cause-1",
		"Ce-Schemaversion": "2",
		"Ce-Xtenant":       "acme",
		"Traceparent":      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"Tracestate":       "vendor=abc",
		"User-Agent":       webhooksink.UserAgentDefault,
		"Authorization":    "Bearer t0ken",
		"X-Env":            "test",
	}
	for name, value := range want {
		require.Equal(t, []string{value}, r.Header.Values(name), "header %s", name)
	}
	for _, absent := range []string{"Ce-Traceparent", "Ce-Tracestate", "Webhook-Id", "Webhook-Signature", "Webhook-Timestamp"} {
		require.Empty(t, r.Header.Values(absent), "header %s", absent)
	}
}

func TestOptionalAttributesAreLeftOut(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	s := newSink(t, srv, webhooksink.Config{Source: "urn:example:orders", UserAgent: "shop/1.0"})
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{{ID: 1, EventType: "ping", Payload: json.RawMessage(`{}`)}}))
	r := srv.only(t)
	for _, absent := range []string{"Ce-Subject", "Ce-Time", "Ce-Aggregatetype", "Traceparent"} {
		require.Empty(t, r.Header.Values(absent), "header %s", absent)
	}
	require.Equal(t, "urn:example:orders", r.Header.Get("Ce-Source"))
	require.Equal(t, "shop/1.0", r.Header.Get("User-Agent"))
}

func TestEventHeadersMapToExtensionAttributes(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	s := newSink(t, srv, webhooksink.Config{})
	e := outbox.Event{ID: 7, EventType: "t", Payload: json.RawMessage(`1`), Headers: map[string]string{
		"id":            "not-the-id",   // core attribute: skipped
		"Type":          "not-the-type", // core attribute after lowercasing: skipped
		"data":          "no",           // reserved
		"aggregatetype": "no",           // set by the sink itself
		"___":           "empty name",   // nothing left: skipped
		"Tenant-ID":     "first",        // sorts before tenant_id and wins
		"tenant_id":     "second",       // loses to Tenant-ID
		"Trace_Parent":  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":    "bad\nvalue",    // not a valid header value: dropped
		"note":          "50% \"off\" ü", // percent-encoded
		"multi":         "a\r\nb",        // control characters are encoded, not rejected
	}}
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))
	r := srv.only(t)
	require.Equal(t, "7", r.Header.Get("Ce-Id"))
	require.Equal(t, "t", r.Header.Get("Ce-Type"))
	require.Empty(t, r.Header.Values("Ce-Data"))
	require.Empty(t, r.Header.Values("Ce-Aggregatetype"))
	require.Equal(t, "first", r.Header.Get("Ce-Tenantid"))
	require.Equal(t, e.Headers["Trace_Parent"], r.Header.Get("Traceparent"))
	require.Empty(t, r.Header.Values("Tracestate"))
	require.Equal(t, "50%25%20%22off%22%20%C3%BC", r.Header.Get("Ce-Note"))
	require.Equal(t, "a%0D%0Ab", r.Header.Get("Ce-Multi"))
	decoded, err := url.PathUnescape(r.Header.Get("Ce-Note"))
	require.NoError(t, err)
	require.Equal(t, e.Headers["note"], decoded)

	var ce []string
	for name := range r.Header {
		if len(name) > 3 && name[:3] == "Ce-" {
			ce = append(ce, name)
		}
	}
	require.ElementsMatch(t, []string{"Ce-Specversion", "Ce-Id", "Ce-Type", "Ce-Source", "Ce-Tenantid", "Ce-Note", "Ce-Multi"}, ce)
}

func TestAttributeName(t *testing.T) {
	t.Parallel()
	for header, want := range map[string]string{
		"correlation_id": "correlationid",
		"causation_id":   "causationid",
		"schema_version": "schemaversion",
		"X-Tenant-ID":    "xtenantid",
		"traceparent":    "traceparent",
		"v2":             "v2",
		"ünïcode":        "ncode",
		"__":             "",
		"":               "",
	} {
		require.Equal(t, want, webhooksink.AttributeName(header), "header %q", header)
	}
}

func TestPercentEncodedAttributesRoundTrip(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	s := newSink(t, srv, webhooksink.Config{})
	e := outbox.Event{ID: 1, EventType: "order created", AggregateID: "Zoë/日本 \"1\" 100%", Payload: json.RawMessage(`{}`)}
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))
	r := srv.only(t)
	for name, want := range map[string]string{"Ce-Type": e.EventType, "Ce-Subject": e.AggregateID} {
		v := r.Header.Get(name)
		for i := 0; i < len(v); i++ {
			require.True(t, v[i] > ' ' && v[i] < 0x7f && v[i] != '"', "%s has byte %q, which must be percent-encoded", name, v[i])
		}
		got, err := url.PathUnescape(v)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
}

func TestCloudEventsSDKReadsTheRequest(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	s := newSink(t, srv, webhooksink.Config{Source: "https://shop.example.com/outbox"})
	e := fullEvent()
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))

	ev, err := cehttp.NewEventFromHTTPRequest(srv.only(t).request())
	require.NoError(t, err)
	require.NoError(t, ev.Validate())
	require.Equal(t, "1.0", ev.SpecVersion())
	require.Equal(t, "4711", ev.ID())
	require.Equal(t, "order.created", ev.Type())
	require.Equal(t, "https://shop.example.com/outbox", ev.Source())
	require.Equal(t, "o-42", ev.Subject())
	require.True(t, e.CreatedAt.Equal(ev.Time()), "time %v, want %v", ev.Time(), e.CreatedAt)
	require.Equal(t, "application/json", ev.DataContentType())
	require.Equal(t, string(e.Payload), string(ev.Data()))
	require.Equal(t, map[string]any{
		"aggregatetype": "order",
		"correlationid": "corr-1",
		"causationid":   "cause-1",
		"schemaversion": "2",
		"xtenant":       "acme",
	}, ev.Extensions())
	var data struct{ Total float64 }
	require.NoError(t, ev.DataAs(&data))
	require.InDelta(t, 12.5, data.Total, 0)
}

// newSecret returns a Standard Webhooks secret in whsec_ form.
func newSecret(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

func TestSignatureVerifiesWithStandardWebhooks(t *testing.T) {
	t.Parallel()
	whsec := newSecret(t)
	for _, tc := range []struct {
		name     string
		secret   string
		verifier func(t *testing.T) *standardwebhooks.Webhook
	}{
		{"WhsecSecret", whsec, func(t *testing.T) *standardwebhooks.Webhook {
			wh, err := standardwebhooks.NewWebhook(whsec)
			require.NoError(t, err)
			return wh
		}},
		{"RawSecret", "correct horse battery staple", func(t *testing.T) *standardwebhooks.Webhook {
			wh, err := standardwebhooks.NewWebhookRaw([]byte("correct horse battery staple"))
			require.NoError(t, err)
			return wh
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t)
			s := newSink(t, srv, webhooksink.Config{Secret: tc.secret})
			e := fullEvent()
			before := time.Now().Unix()
			require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))
			r := srv.only(t)

			require.Equal(t, "4711", r.Header.Get("webhook-id"))
			ts, err := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
			require.NoError(t, err)
			require.GreaterOrEqual(t, ts, before)
			require.Regexp(t, `^v1,[A-Za-z0-9+/]{43}=$`, r.Header.Get("webhook-signature"))

			wh := tc.verifier(t)
			require.NoError(t, wh.Verify(r.Body, r.Header))
			require.Error(t, wh.Verify([]byte(`{"total": 0}`), r.Header), "a changed body must not verify")
			other, err := standardwebhooks.NewWebhook(newSecret(t))
			require.NoError(t, err)
			require.Error(t, other.Verify(r.Body, r.Header), "another secret must not verify")
		})
	}
}

func TestSignatureIsFreshOnEveryAttempt(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	secret := newSecret(t)
	s := newSink(t, srv, webhooksink.Config{Secret: secret})
	e := fullEvent()
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))
	got := srv.received()
	require.Len(t, got, 2)
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	for _, r := range got {
		require.Equal(t, "4711", r.Header.Get("webhook-id"), "the id is stable so receivers can drop duplicates")
		require.NoError(t, wh.Verify(r.Body, r.Header))
	}
}

func TestCancelledContextSendsNothing(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	s := newSink(t, srv, webhooksink.Config{Concurrency: 2})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	errs := s.Publish(ctx, []outbox.Event{fullEvent(), fullEvent(), fullEvent()})
	require.Len(t, errs, 3)
	for _, err := range errs {
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, outbox.IsPermanent(err))
		require.Contains(t, err.Error(), "webhooksink: event 4711: not sent")
	}
	require.Empty(t, srv.received())
}

// Two tenants' schemas each have an event 4711: a receiver that drops
// duplicates on webhook-id (or ce-id) must take both, and still drop the
// re-delivery of either; the Standard Webhooks signature covers the
// qualified id.
func TestTenantsWithTheSameIDsAreNotDuplicates(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	secret := newSecret(t)
	s := newSink(t, srv, webhooksink.Config{Secret: secret})
	acme := fullEvent()
	acme.Tenant = "s_acme"
	globex := acme
	globex.Tenant, globex.Database = `x"; drop table y; --`, "db2:5432/app"
	for range 2 {
		require.Nil(t, s.Publish(t.Context(), []outbox.Event{acme, globex}))
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	kept := map[string]received{}
	for _, r := range srv.received() {
		require.NoError(t, wh.Verify(r.Body, r.Header))
		ceID, err := url.PathUnescape(r.Header.Get("ce-id"))
		require.NoError(t, err)
		require.Equal(t, r.Header.Get("webhook-id"), ceID, "ce-id is the same id, percent-encoded as the binding requires")
		if _, dup := kept[r.Header.Get("webhook-id")]; !dup {
			kept[r.Header.Get("webhook-id")] = r
		}
	}
	require.Len(t, kept, 2, "a receiver deduplicating on webhook-id keeps one delivery per tenant")
	require.Equal(t, "s_acme", kept["s_acme:4711"].Header.Get("ce-tenant"))
	g := kept["db2%3A5432/app:x%22;%20drop%20table%20y;%20--:4711"]
	require.Equal(t, `x%22;%20drop%20table%20y;%20--`, g.Header.Get("ce-tenant"), "percent-encoded as the binding requires")
	require.Equal(t, "db2:5432/app", g.Header.Get("ce-database"))
}
