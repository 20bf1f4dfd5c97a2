package inbox_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
)

var quiet = slog.New(slog.DiscardHandler)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// sign signs as Standard Webhooks does (the webhook sink's own signing is
// checked against the handler in sink/webhooksink).
func sign(t *testing.T, secret, id string, ts time.Time, body []byte) http.Header {
	t.Helper()
	key, err := inbox.SecretKey(secret)
	require.NoError(t, err)
	unix := strconv.FormatInt(ts.Unix(), 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + unix + "."))
	mac.Write(body)
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", unix)
	h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	h.Set("Content-Type", "application/json")
	h.Set("ce-id", id)
	h.Set("ce-source", "/outbox")
	h.Set("ce-type", "order.created")
	h.Set("ce-time", ts.UTC().Format(time.RFC3339Nano))
	h.Set("ce-correlationid", "req%2042")
	return h
}

type recorded struct {
	msgs []inbox.Message
	fail error
}

func (r *recorded) receive(_ context.Context, m inbox.Message) (inbox.Result, error) {
	if r.fail != nil {
		return inbox.Result{}, r.fail
	}
	for _, old := range r.msgs {
		if old.ID == m.ID && old.Source == m.Source {
			return inbox.Result{Duplicate: true}, nil
		}
	}
	r.msgs = append(r.msgs, m)
	return inbox.Result{}, nil
}

func TestWebhookHandler(t *testing.T) {
	t.Parallel()
	rec := &recorded{}
	h, err := inbox.NewWebhookHandler(inbox.WebhookConfig{Receive: rec.receive, Secret: testSecret, MaxBodyBytes: 64, Logger: quiet})
	require.NoError(t, err)
	body := []byte(`{"order_id":"o-1"}`)
	post := func(hdr http.Header, body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/any/path", bytes.NewReader(body))
		req.Header = hdr
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	now := time.Now()

	w := post(sign(t, testSecret, "17", now, body), body)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.JSONEq(t, `{"status":"stored"}`, w.Body.String())
	require.Len(t, rec.msgs, 1)
	m := rec.msgs[0]
	require.Equal(t, "17", m.ID)
	require.Equal(t, "/outbox", m.Source)
	require.Equal(t, "order.created", m.EventType)
	require.Equal(t, "req 42", m.Headers["correlationid"], "ce-* values are percent-decoded")
	require.JSONEq(t, string(body), string(m.Payload))
	require.WithinDuration(t, now, m.Time, time.Second)

	w = post(sign(t, testSecret, "17", now, body), body)
	require.Equal(t, http.StatusOK, w.Code)
	require.JSONEq(t, `{"status":"duplicate"}`, w.Body.String())
	require.Len(t, rec.msgs, 1)

	bad := sign(t, "whsec_"+base64.StdEncoding.EncodeToString([]byte("another key")), "18", now, body)
	missing := sign(t, testSecret, "18", now, body)
	missing.Del("webhook-signature")
	tampered := sign(t, testSecret, "18", now, body)
	for _, c := range []struct {
		name string
		hdr  http.Header
		body []byte
		code int
		says string
	}{
		{"wrong secret", bad, body, http.StatusUnauthorized, "no v1 signature matches"},
		{"missing signature", missing, body, http.StatusUnauthorized, "missing signature"},
		{"tampered body", tampered, []byte(`{"order_id":"o-2"}`), http.StatusUnauthorized, "no v1 signature matches"},
		{"replayed old timestamp", sign(t, testSecret, "18", now.Add(-6*time.Minute), body), body, http.StatusUnauthorized, "tolerance"},
		{"timestamp from the future", sign(t, testSecret, "18", now.Add(6*time.Minute), body), body, http.StatusUnauthorized, "tolerance"},
		{"body over the limit", sign(t, testSecret, "18", now, bytes.Repeat([]byte(" "), 65)), bytes.Repeat([]byte(" "), 65), http.StatusRequestEntityTooLarge, "limit"},
		{"not JSON", sign(t, testSecret, "18", now, []byte("hello")), []byte("hello"), http.StatusBadRequest, "not valid JSON"},
	} {
		w := post(c.hdr, c.body)
		require.Equal(t, c.code, w.Code, c.name)
		require.Contains(t, w.Body.String(), c.says, c.name)
	}
	require.Len(t, rec.msgs, 1, "nothing refused was stored")

	// A body over the limit without a Content-Length is cut while read.
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat(" ", 100)))
	req.ContentLength = -1
	req.Header = sign(t, testSecret, "19", now, nil)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	require.Equal(t, http.StatusRequestEntityTooLarge, w.Code)

	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, http.StatusMethodNotAllowed, w.Code)

	// A store that fails answers 503, which the sink retries.
	rec.fail = errors.New("connection refused")
	w = post(sign(t, testSecret, "20", now, body), body)
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.NotContains(t, w.Body.String(), "connection refused", "database errors stay in the log")
}

func TestWebhookHandlerUnsigned(t *testing.T) {
	t.Parallel()
	rec := &recorded{}
	h, err := inbox.NewWebhookHandler(inbox.WebhookConfig{Receive: rec.receive, Source: "/partner", Logger: quiet})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{}`))
	req.Header.Set("ce-id", "a1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "/partner", rec.msgs[0].Source)

	req = httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{}`))
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	require.Equal(t, http.StatusBadRequest, w.Code)
	require.Contains(t, w.Body.String(), "webhook-id or ce-id")
}

func TestWebhookConfigErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg   inbox.WebhookConfig
		field string
	}{
		{inbox.WebhookConfig{}, "Receive"},
		{inbox.WebhookConfig{Receive: (&recorded{}).receive, Secret: "whsec_"}, "Secret"},
		{inbox.WebhookConfig{Receive: (&recorded{}).receive, Secret: "whsec_!!!"}, "Secret"},
		{inbox.WebhookConfig{Receive: (&recorded{}).receive, Tolerance: -1}, "Tolerance"},
	} {
		_, err := inbox.NewWebhookHandler(c.cfg)
		var ce *outbox.ConfigError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, c.field, ce.Field)
		require.NotContains(t, err.Error(), "!!!", "errors never quote the secret")
	}
}

func TestWebhookHandlerBatchGoesToReceiveBatch(t *testing.T) {
	t.Parallel()
	rec := &recorded{}
	var calls [][]inbox.Message
	var batchFail error
	receiveBatch := func(ctx context.Context, ms []inbox.Message) ([]inbox.Result, error) {
		if batchFail != nil {
			return nil, batchFail
		}
		calls = append(calls, ms)
		results := make([]inbox.Result, len(ms))
		for i, m := range ms {
			var err error
			if results[i], err = rec.receive(ctx, m); err != nil {
				return nil, err
			}
		}
		return results, nil
	}
	event := func(id string) string {
		return `{"specversion":"1.0","id":"` + id + `","source":"/outbox","type":"order.created","data":{"n":"` + id + `"}}`
	}
	post := func(h http.Handler, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/cloudevents-batch+json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	h, err := inbox.NewWebhookHandler(inbox.WebhookConfig{Receive: rec.receive, ReceiveBatch: receiveBatch, Logger: quiet})
	require.NoError(t, err)

	w := post(h, `[`+event("1")+`,`+event("2")+`,`+event("3")+`]`)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.JSONEq(t, `{"status":"stored"}`, w.Body.String())
	require.Len(t, calls, 1, "one call for the whole batch")
	require.Len(t, calls[0], 3)
	require.Len(t, rec.msgs, 3)

	w = post(h, `[`+event("2")+`,`+event("3")+`]`)
	require.JSONEq(t, `{"status":"duplicate"}`, w.Body.String())

	w = post(h, `[`+event("4")+`]`)
	require.Equal(t, http.StatusOK, w.Code)
	require.Len(t, calls, 2, "a batch of one goes to Receive")
	require.Len(t, rec.msgs, 4)

	batchFail = errors.New("connection refused")
	w = post(h, `[`+event("5")+`,`+event("6")+`]`)
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.NotContains(t, w.Body.String(), "connection refused")
	require.Len(t, rec.msgs, 4)

	// Without ReceiveBatch, each message goes through Receive.
	rec2 := &recorded{}
	h, err = inbox.NewWebhookHandler(inbox.WebhookConfig{Receive: rec2.receive, Logger: quiet})
	require.NoError(t, err)
	w = post(h, `[`+event("1")+`,`+event("2")+`]`)
	require.Equal(t, http.StatusOK, w.Code)
	require.Len(t, rec2.msgs, 2)
}
