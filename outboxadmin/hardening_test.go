package outboxadmin_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxadmin"
)

func TestTokenlessHandlerAnswersLoopbackHostsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *outboxadmin.Config) { c.AllowedHosts = []string{"outbox.internal", "ops.example:8443"} })
	ids := b.seed(t)

	for _, host := range []string{"localhost", "localhost:8080", "LOCALHOST.:1", "127.0.0.1", "127.0.0.1:9", "127.1.2.3:80",
		"[::1]", "[::1]:8080", "outbox.internal", "outbox.internal:8080", "ops.example:8443"} {
		res := b.get(t, "/api/stats", "Host", host)
		require.Equal(t, http.StatusOK, res.code, "Host %s: %s", host, res.body)
	}
	// A page of another origin whose name resolves to 127.0.0.1 (DNS
	// rebinding) sends its own name as Host: it gets nothing, and cannot
	// act.
	for _, host := range []string{"evil.example", "evil.example:8080", "127.0.0.1.nip.io", "localhost.evil.example",
		"ops.example:8080", "ops.example", "[::2]:80", "10.0.0.1"} {
		for _, p := range []string{"/", "/api/stats", "/api/events", "/assets/app.js"} {
			res := b.get(t, p, "Host", host)
			require.Equal(t, http.StatusForbidden, res.code, "Host %q %s: %s", host, p, res.body)
		}
		res := b.post(t, "/api/events/retry", map[string]any{"ids": []int64{ids[4]}}, "Host", host)
		require.Equal(t, http.StatusForbidden, res.code)
		require.Contains(t, res.errorText(t), "is not allowed: without authentication the admin API answers only to localhost")
	}
	require.Equal(t, outbox.StatusFailed, b.event(t, ids[4]).Status)
	require.Contains(t, b.logs.String(), `msg="request for another host refused"`)
}

func TestHostCheckWithAuthenticationOrAnyHost(t *testing.T) {
	t.Parallel()
	// With a token, the token protects the API, whatever the Host.
	b := setup(t, func(c *outboxadmin.Config) { c.AuthToken = testToken })
	require.Equal(t, http.StatusOK, b.get(t, "/api/stats", "Host", "outbox.example.com", "Authorization", "Bearer "+testToken).code)
	require.Equal(t, http.StatusUnauthorized, b.get(t, "/api/stats", "Host", "outbox.example.com").code)

	// AnyHost turns the check off, for a handler behind one's own
	// authentication.
	b = setup(t, func(c *outboxadmin.Config) { c.AllowedHosts = []string{outboxadmin.AnyHost} })
	require.Equal(t, http.StatusOK, b.get(t, "/api/stats", "Host", "outbox.example.com").code)

	for _, bad := range []string{"", "http://x", "a/b", "user@host", "two words"} {
		_, err := outboxadmin.New(outboxadmin.Config{Manager: b.mgr, AllowedHosts: []string{bad}})
		var ce *outbox.ConfigError
		require.ErrorAs(t, err, &ce, bad)
		require.Equal(t, "AllowedHosts", ce.Field)
	}
}

func TestUnstorableParametersAreBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t)
	for _, p := range []string{
		"/api/events?type=order%00created", "/api/events?aggregate_id=%ff", "/api/events?aggregate_type=a%00",
		"/api/events?idempotency_key=%c3%28", "/api/events?%00=1", "/api/events/%00", "/api/events/1%ff",
	} {
		res := b.get(t, p)
		require.Equal(t, http.StatusBadRequest, res.code, "%s: %s", p, res.body)
		require.Contains(t, res.errorText(t), "NUL byte or invalid UTF-8", p)
	}
	for _, f := range []map[string]any{{"type": "a\x00b"}, {"aggregate_id": "\x00"}, {"idempotency_key": "k\x00"}} {
		res := b.post(t, "/api/events/retry", map[string]any{"filter": f})
		require.Equal(t, http.StatusBadRequest, res.code, "%v: %s", f, res.body)
		require.Contains(t, res.errorText(t), "holds a NUL byte or invalid UTF-8")
	}
	require.NotContains(t, b.logs.String(), "admin request failed")
}

func TestSearchCursorAtTheLargestLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	msgs := make([]outbox.Message, outbox.SearchLimitMax+1)
	for i := range msgs {
		msgs[i] = outbox.Message{EventType: "bulk", Payload: i}
	}
	ids := b.write(t, msgs...)

	var page outboxadmin.EventsJSON
	b.getJSON(t, path("/api/events?limit=%d", outbox.SearchLimitMax), &page)
	require.Len(t, page.Events, outbox.SearchLimitMax)
	require.NotNil(t, page.NextBeforeID, "a full page of the largest size has a next page")
	require.Equal(t, ids[1], *page.NextBeforeID)

	b.getJSON(t, path("/api/events?limit=%d&before_id=%d", outbox.SearchLimitMax, *page.NextBeforeID), &page)
	require.Equal(t, []int64{ids[0]}, idsOf(page.Events))
	require.Nil(t, page.NextBeforeID)

	// A last page exactly as long as the limit has no next one.
	b.getJSON(t, path("/api/events?limit=%d&before_id=%d", outbox.SearchLimitMax, ids[outbox.SearchLimitMax]), &page)
	require.Len(t, page.Events, outbox.SearchLimitMax)
	require.Nil(t, page.NextBeforeID)
}
