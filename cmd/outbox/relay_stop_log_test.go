package main_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
)

// TestRelayStopLogOrder stops a relay whose batch is still publishing to
// a webhook that does not answer: the signal line, then the WARN that the
// batch was cancelled and its events released, then "relay stopped" as
// the relay's last line (issue 13 §3).
func TestRelayStopLogOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.writeN(t, 4)
	var requests atomic.Int64
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		select { // hold the batch until the relay gives up on it
		case <-r.Context().Done():
		case <-hold:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hold) }) // runs first: Close waits for the handlers

	p := start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", b.schema, "--log-format", "json",
		"relay", "--sink", srv.URL+"/hook", "--lease", "20s", "--sink-timeout", "15s", "--shutdown-timeout", "300ms",
		"--poll-interval", "50ms")
	testutil.WaitFor(t, 30*time.Second, "a batch in flight", func() bool {
		require.False(t, p.exited(), "relay exited early; stderr:\n%s", p.stderr.String())
		return requests.Load() > 0
	})
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), "stderr:\n%s", p.stderr.String())

	var msgs []string
	for line := range strings.Lines(p.stderr.String()) {
		var rec struct {
			Msg string `json:"msg"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &rec), "--log-format json: %q", line)
		msgs = append(msgs, rec.Msg)
	}
	signal := slices.Index(msgs, "shutdown signal received; finishing in-flight batches, up to --shutdown-timeout")
	released := slices.IndexFunc(msgs, func(m string) bool {
		return strings.HasPrefix(m, "in-flight batches outlived the shutdown timeout; they were cancelled and their events released to pending")
	})
	stopped := slices.Index(msgs, "relay stopped")
	require.NotEqual(t, -1, signal, "stderr:\n%s", p.stderr.String())
	require.NotEqual(t, -1, released, "stderr:\n%s", p.stderr.String())
	require.Equal(t, len(msgs)-1, stopped, "relay stopped is the last line; stderr:\n%s", p.stderr.String())
	require.Less(t, signal, released)
	require.Less(t, released, stopped)

	s := b.stats(t)
	require.EqualValues(t, 4, s.Pending, "released to pending")
	require.Zero(t, s.Processing)
}
