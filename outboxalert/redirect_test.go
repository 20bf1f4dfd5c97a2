package outboxalert_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxalert"
)

// A webhook that redirects elsewhere does not get the alert, nor its
// headers (an API key), sent on: the redirect is reported, not followed.
func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	var leaked atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		leaked.Add(1)
	}))
	t.Cleanup(elsewhere.Close)
	var asked atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Redirect(w, r, elsewhere.URL+"/collect?token=x", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(hook.Close)

	// A caller's client that follows redirects is copied, not obeyed.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}
	a, logs := newAlerter(t, outboxalert.Config{URL: hook.URL, Header: http.Header{"X-Api-Key": {"k3y-s3cret"}},
		Client: client, Interval: time.Millisecond})
	a.OnDeadLetter(t.Context(), deadEvent(1, "order.created"), outbox.Permanent(errors.New("rejected")))
	closeAlerter(t, a)

	require.Equal(t, int32(1), asked.Load(), "a redirect is not retried")
	require.Zero(t, leaked.Load(), "the alert and its headers went to the redirect's target")
	require.Contains(t, logs.String(), "307 Temporary Redirect to "+elsewhere.URL+": redirects are not followed")
	require.NotContains(t, logs.String(), "token=x")
	require.NotContains(t, logs.String(), "k3y-s3cret")
	require.NoError(t, client.CheckRedirect(nil, nil), "the caller's client is left as it was")
}

func TestRetryBackoffIsBounded(t *testing.T) {
	t.Parallel()
	_, err := outboxalert.New(outboxalert.Config{URL: "https://alerts.example.com/", RetryBackoff: 1 << 62})
	var ce *outbox.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "RetryBackoff", ce.Field)
}
