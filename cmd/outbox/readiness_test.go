package main_test

import (
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
)

// TestRelayReadiness follows /readyz through a relay's life: ready with the
// database up; not ready, naming the database, while the database cannot
// be reached (its connections cut and new ones refused), though /healthz
// still answers; ready again when it is back; not ready as soon as SIGTERM
// arrives, while a batch still publishes.
func TestRelayReadiness(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const password = "ReadyzPassw0rd"
	u, err := url.Parse(withPassword(t, password))
	require.NoError(t, err)
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr()
	srv := newGateServer(t) // holds every publish until letThrough

	p := start(t, nil, "--database-url", u.String(), "--schema", b.schema, "--log-format", "json",
		"relay", "--sink", srv.URL, "--metrics-addr", "127.0.0.1:0", "--poll-interval", "50ms",
		"--db-timeout", "2s", "--shutdown-timeout", "10s")
	addr := obsLogValue(t, p, "serving metrics", "addr")
	readyz, healthz := "http://"+addr+"/readyz", "http://"+addr+"/healthz"
	waitReady := func(what string, wantCode int, want ...string) string {
		t.Helper()
		var body, logged string
		testutil.WaitFor(t, 20*time.Second, what, func() bool {
			code, text := obsGet(t, readyz)
			body = text
			ok := code == wantCode
			for _, w := range want {
				ok = ok && strings.Contains(text, w)
			}
			if !ok && text != logged {
				// Shown when the wait fails: what /readyz said instead.
				t.Logf("waiting for %s: /readyz answered %d:\n%s", what, code, text)
				logged = text
			}
			return ok
		})
		require.NotContains(t, body, password)
		return body
	}

	body := waitReady("/readyz to answer ready", http.StatusOK)
	require.Equal(t, "ready\nrelay: ok\ndatabase: ok\nsink: ok\n", body)

	proxy.Refuse()
	body = waitReady("/readyz to report the database down", http.StatusServiceUnavailable, "not ready\n", "relay: ok\n", "database: ")
	require.NotContains(t, body, "database: ok")
	t.Logf("/readyz with the database down:\n%s", body)
	code, health := obsGet(t, healthz)
	require.Equal(t, http.StatusOK, code, "liveness must not follow the database")
	require.Equal(t, "ok\n", health)

	proxy.Allow()
	waitReady("/readyz to recover with the database", http.StatusOK, "database: ok\n")

	// SIGTERM with a batch in flight: the relay is stopping, not ready,
	// while it waits for the batch.
	b.writeN(t, 1)
	srv.waitArrived(t, 1)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	waitReady("/readyz to turn away a stopping relay", http.StatusServiceUnavailable, "relay: stopping\n")
	require.False(t, p.exited(), "the relay exited before its batch finished; stderr:\n%s", p.stderr.String())
	srv.letThrough()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the relay did not exit after its batch finished; stderr:\n%s", p.stderr.String())
	}
	require.NoError(t, p.err, "stderr:\n%s", p.stderr.String())
}
