package webhooksink_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/webhooksink"
)

// Secrets every test in this file configures; none may show up in errors.
const (
	testSecret   = "whsec_c2VjcmV0LWtleS1uZXZlci1pbi1lcnJvcnM="
	testToken    = "Bearer s3cr3t-t0ken-value"
	testPassword = "hunter2-password"
	testPathTok  = "T0KEN-IN-PATH"
)

// secretConfig points at srv with every kind of secret configured.
func secretConfig(srv *server) webhooksink.Config {
	u := strings.Replace(srv.URL, "http://", "http://user:"+testPassword+"@", 1)
	return webhooksink.Config{
		URL:     u + "/hooks/" + testPathTok + "?sig=" + testPathTok,
		Secret:  testSecret,
		Headers: map[string]string{"Authorization": testToken},
	}
}

func requireNoSecrets(t *testing.T, text string) {
	t.Helper()
	for _, secret := range []string{testSecret, "c2VjcmV0LWtleS1uZXZlci1pbi1lcnJvcnM", testToken, "s3cr3t-t0ken-value", testPassword, testPathTok} {
		require.NotContains(t, text, secret)
	}
}

func TestStatusClassification(t *testing.T) {
	t.Parallel()
	const (
		ok = iota
		retryable
		permanent
	)
	for _, tc := range []struct {
		code int
		want int
		text string // in the error
	}{
		{200, ok, ""},
		{201, ok, ""},
		{204, ok, ""},
		{301, permanent, "answered 301 Moved Permanently to https://elsewhere.example/…: redirects are not followed; set the webhook URL to the final URL"},
		{400, permanent, "answered 400 Bad Request: the endpoint rejected the event"},
		{401, permanent, "check the webhook secret and headers"},
		{404, permanent, "answered 404 Not Found"},
		{408, retryable, "answered 408 Request Timeout (retryable)"},
		{409, permanent, "answered 409 Conflict"},
		{410, permanent, "answered 410 Gone"},
		{422, permanent, "answered 422 Unprocessable Entity"},
		{429, retryable, "answered 429 Too Many Requests (retryable)"},
		{500, retryable, "answered 500 Internal Server Error (retryable)"},
		{503, retryable, "answered 503 Service Unavailable (retryable)"},
	} {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			t.Parallel()
			srv := newServer(t)
			srv.setRespond(func(w http.ResponseWriter, _ *http.Request) {
				if tc.code == http.StatusMovedPermanently {
					w.Header().Set("Location", "https://elsewhere.example/new/"+testPathTok)
				}
				w.WriteHeader(tc.code)
				_, _ = fmt.Fprintf(w, "answer %d", tc.code)
			})
			s := newSink(t, srv, secretConfig(srv))
			errs := s.Publish(t.Context(), []outbox.Event{fullEvent()})
			if tc.want == ok {
				require.Nil(t, errs)
				return
			}
			require.Len(t, errs, 1)
			err := errs[0]
			require.Error(t, err)
			require.Equal(t, tc.want == permanent, outbox.IsPermanent(err), "permanent: %v", err)
			var se *webhooksink.StatusError
			require.ErrorAs(t, err, &se)
			require.Equal(t, tc.code, se.StatusCode)
			require.Equal(t, int64(4711), se.EventID)
			require.Equal(t, fmt.Sprintf("answer %d", tc.code), se.Body)
			require.Contains(t, err.Error(), "webhooksink: event 4711: POST http://127.0.0.1:")
			require.Contains(t, err.Error(), tc.text)
			require.Contains(t, err.Error(), fmt.Sprintf("; response: answer %d", tc.code))
			requireNoSecrets(t, err.Error())
		})
	}
}

func TestRetryableStatusCodes(t *testing.T) {
	t.Parallel()
	for code, want := range map[int]bool{
		300: false, 302: false, 308: false, 400: false, 403: false, 404: false, 413: false, 499: false,
		408: true, 429: true, 500: true, 502: true, 504: true, 599: true, 600: true, 199: true,
	} {
		require.Equal(t, want, webhooksink.Retryable(code), "status %d", code)
	}
}

func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	target := newServer(t)
	srv := newServer(t)
	srv.setRespond(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/final", http.StatusTemporaryRedirect)
	})
	// A caller's client that follows redirects is copied, not obeyed.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}
	s := newSink(t, srv, webhooksink.Config{Client: client})
	errs := s.Publish(t.Context(), []outbox.Event{fullEvent()})
	require.Len(t, errs, 1)
	require.True(t, outbox.IsPermanent(errs[0]))
	require.Contains(t, errs[0].Error(), "307 Temporary Redirect to "+target.URL+"/…: redirects are not followed")
	require.Empty(t, target.received())
	require.NoError(t, client.CheckRedirect(nil, nil), "the caller's client is left as it was")
}

func TestTimeoutIsRetryable(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	release := make(chan struct{})
	srv.setRespond(func(w http.ResponseWriter, r *http.Request) {
		select { // blocks past the sink's Timeout
		case <-r.Context().Done():
		case <-release:
		}
	})
	cfg := secretConfig(srv)
	cfg.Timeout = 50 * time.Millisecond
	s := newSink(t, srv, cfg)
	defer close(release)

	errs := s.Publish(t.Context(), []outbox.Event{fullEvent()})
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs[0], context.DeadlineExceeded)
	require.False(t, outbox.IsPermanent(errs[0]))
	require.Contains(t, errs[0].Error(), "no answer within 50ms")
	require.Contains(t, errs[0].Error(), "raise the webhook timeout")
	requireNoSecrets(t, errs[0].Error())
}

func TestConnectionRefusedIsRetryable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	s, err := webhooksink.New(webhooksink.Config{
		URL:     "http://user:" + testPassword + "@" + addr + "/hooks/" + testPathTok + "?sig=" + testPathTok,
		Secret:  testSecret,
		Headers: map[string]string{"Authorization": testToken},
	})
	require.NoError(t, err)
	defer s.Close()
	errs := s.Publish(t.Context(), []outbox.Event{fullEvent()})
	require.Len(t, errs, 1)
	require.False(t, outbox.IsPermanent(errs[0]))
	var opErr *net.OpError
	require.ErrorAs(t, errs[0], &opErr)
	require.Contains(t, errs[0].Error(), "webhooksink: event 4711: POST http://"+addr+"/…: ")
	require.Contains(t, errs[0].Error(), "connection refused")
	requireNoSecrets(t, errs[0].Error())
}

func TestEchoedSecretsAreCutFromErrors(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	srv.setRespond(func(w http.ResponseWriter, r *http.Request) {
		// A debugging endpoint that echoes the request back.
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, "auth=%s token=%s url=%s", r.Header.Get("Authorization"),
			strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), r.URL)
	})
	s := newSink(t, srv, secretConfig(srv))
	errs := s.Publish(t.Context(), []outbox.Event{fullEvent()})
	require.Len(t, errs, 1)
	requireNoSecrets(t, errs[0].Error())
	require.Contains(t, errs[0].Error(), "auth=[REDACTED] token=[REDACTED]")
}

func TestEchoedBasicAuthIsCutFromErrors(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	srv.setRespond(func(w http.ResponseWriter, r *http.Request) {
		user, pw, ok := r.BasicAuth()
		w.WriteHeader(http.StatusForbidden)
		_, _ = fmt.Fprintf(w, "basic=%v header=%s user=%s pw=%s", ok, r.Header.Get("Authorization"), user, pw)
	})
	cfg := secretConfig(srv)
	cfg.Headers = nil // the URL's userinfo becomes Basic authentication
	s := newSink(t, srv, cfg)
	errs := s.Publish(t.Context(), []outbox.Event{fullEvent()})
	require.Len(t, errs, 1)
	requireNoSecrets(t, errs[0].Error())
	require.Contains(t, errs[0].Error(), "basic=true header=Basic [REDACTED] user=user pw=[REDACTED]")
}

func TestLongBodyIsCutAtASafePlace(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	// 199 ASCII bytes, then 3-byte runes: the cut at 200 bytes falls
	// inside one.
	body := strings.Repeat("x", 199) + strings.Repeat("日", 5000) + "\nEND"
	srv.answer(http.StatusInternalServerError, body)
	s := newSink(t, srv, webhooksink.Config{})
	errs := s.Publish(t.Context(), []outbox.Event{fullEvent()})
	require.Len(t, errs, 1)
	var se *webhooksink.StatusError
	require.ErrorAs(t, errs[0], &se)
	require.True(t, utf8.ValidString(se.Body))
	require.Equal(t, strings.Repeat("x", 199)+"…", se.Body)
	require.NotContains(t, errs[0].Error(), "END")
}

func TestBodyWhitespaceIsCollapsed(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	srv.answer(http.StatusBadRequest, "{\n  \"error\":\t\"bad\x00 field\"\r\n}")
	s := newSink(t, srv, webhooksink.Config{})
	errs := s.Publish(t.Context(), []outbox.Event{fullEvent()})
	var se *webhooksink.StatusError
	require.ErrorAs(t, errs[0], &se)
	require.Equal(t, `{ "error": "bad field" }`, se.Body)
}

func TestConnectionsAreReusedAfterErrorAnswers(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	// Bodies below the drain limit are read to the end, so the
	// connection goes back to the pool whatever the answer.
	srv.answer(http.StatusServiceUnavailable, strings.Repeat("busy ", 2000))
	s := newSink(t, srv, webhooksink.Config{Concurrency: 1})
	for range 10 {
		errs := s.Publish(t.Context(), []outbox.Event{fullEvent()})
		require.Len(t, errs, 1)
	}
	srv.answer(http.StatusOK, strings.Repeat("ok ", 2000))
	for range 10 {
		require.Nil(t, s.Publish(t.Context(), []outbox.Event{fullEvent()}))
	}
	require.Len(t, srv.received(), 20)
	require.Equal(t, int32(1), srv.conns.Load(), "every answer was drained and closed, so one connection served all")
}

// countingBody records whether it was closed.
type countingBody struct {
	io.Reader
	closed bool
}

func (b *countingBody) Close() error { b.closed = true; return nil }

func TestResponseBodiesAreClosed(t *testing.T) {
	t.Parallel()
	var bodies []*countingBody
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		code := http.StatusOK
		if r.Header.Get("Ce-Id") == "2" {
			code = http.StatusBadRequest
		}
		b := &countingBody{Reader: strings.NewReader(strings.Repeat("z", 1000))}
		bodies = append(bodies, b)
		return &http.Response{StatusCode: code, Body: b, Header: http.Header{}, Request: r}, nil
	})}
	s, err := webhooksink.New(webhooksink.Config{URL: "http://example.invalid/", Client: client, Concurrency: 1})
	require.NoError(t, err)
	errs := s.Publish(t.Context(), []outbox.Event{{ID: 1, EventType: "a"}, {ID: 2, EventType: "a"}, {ID: 3, EventType: "a"}})
	require.Len(t, errs, 3)
	require.True(t, outbox.IsPermanent(errs[1]))
	require.Len(t, bodies, 3)
	for i, b := range bodies {
		require.True(t, b.closed, "body %d", i)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestTransportErrorsKeepTheirCause(t *testing.T) {
	t.Parallel()
	errTLS := errors.New("tls: failed to verify certificate")
	client := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, errTLS })}
	s, err := webhooksink.New(webhooksink.Config{URL: "https://user:" + testPassword + "@example.invalid/" + testPathTok, Client: client})
	require.NoError(t, err)
	errs := s.Publish(t.Context(), []outbox.Event{{ID: 9, EventType: "a"}})
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs[0], errTLS)
	require.False(t, outbox.IsPermanent(errs[0]))
	require.Equal(t, "webhooksink: event 9: POST https://example.invalid/…: tls: failed to verify certificate", errs[0].Error())
}
