package main_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxadmin"
)

// TestRelayHeartbeatRow runs relay processes and reads outbox_relays: an
// idle relay is listed with its sink redacted, a SIGKILLed one goes stale,
// one stopped with SIGTERM disappears, and no secret of the sink URL
// reaches the table or outbox stats.
func TestRelayHeartbeatRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	secrets := []string{"pw-secret", "path-secret", "query-secret"}
	sinkURL := strings.Replace(srv.URL, "http://", "http://hook-user:pw-secret@", 1) + "/hooks/path-secret?token=query-secret"
	relay := func(id string) *process {
		return start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", b.schema, "relay", "--sink", sinkURL,
			"--relay-id", id, "--poll-interval", "50ms", "--heartbeat-interval", "100ms", "--log-level", "warn")
	}
	find := func(id string) (outbox.RelayInfo, bool) {
		relays, err := b.mgr.Relays(b.ctx)
		require.NoError(t, err)
		for _, r := range relays {
			if r.RelayID == id {
				return r, true
			}
		}
		return outbox.RelayInfo{}, false
	}

	killed, stopped := relay("hb-killed"), relay("hb-stopped")
	testutil.WaitFor(t, 30*time.Second, "both relays listed", func() bool {
		_, k := find("hb-killed")
		_, s := find("hb-stopped")
		return k && s
	})
	idle, _ := find("hb-killed")
	require.True(t, idle.Heartbeat)
	require.False(t, idle.Stale)
	require.Zero(t, idle.Lease.Events)
	require.True(t, idle.LastClaim.IsZero(), "it has claimed nothing")
	require.NotEqual(t, os.Getpid(), idle.PID, "the PID is the relay process's")
	require.Equal(t, strings.TrimPrefix(srv.URL, "http://"), strings.TrimSuffix(strings.TrimPrefix(idle.Sink, "http://"), "/…"),
		"the sink is named by scheme and host, its path left out")

	res := outboxCmd(t, b.schema, "stats", "--json")
	requireOK(t, res)
	var doc outboxadmin.RelaysJSON
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	require.Len(t, doc.Relays, 2)
	require.Equal(t, "hb-killed", doc.Relays[0].RelayID)
	require.Nil(t, doc.Relays[0].LastClaimAt)
	res = outboxCmd(t, b.schema, "stats")
	requireOK(t, res)
	require.Contains(t, res.stdout, "relays")
	require.Regexp(t, `hb-killed\s+idle, http://`, res.stdout)

	var rows string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT string_agg(r::text, ' ') FROM `+
		`"`+b.schema+`".outbox_relays r`).Scan(&rows))
	for _, s := range secrets {
		require.NotContains(t, rows, s)
		require.NotContains(t, res.stdout, s)
	}

	require.NoError(t, killed.cmd.Process.Signal(syscall.SIGKILL))
	<-killed.done
	testutil.WaitFor(t, 30*time.Second, "the killed relay to go stale", func() bool {
		r, ok := find("hb-killed")
		return ok && r.Stale
	})
	r, _ := find("hb-stopped")
	require.False(t, r.Stale, "the running relay keeps renewing")

	require.Equal(t, 0, stopped.stop(t, syscall.SIGTERM))
	_, listed := find("hb-stopped")
	require.False(t, listed, "a relay stopped gracefully removed its row")
	for _, s := range secrets {
		require.NotContains(t, stopped.stderr.String(), s)
	}
}

// TestRelayDeliveryRefused: outbox relay refuses to start beside a running
// relay of the schema that delivers otherwise, exits 1 with one line
// naming that relay and both deliveries, and starts once it stopped.
// outbox stats lists how each relay delivers.
func TestRelayDeliveryRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	relay := func(id string, args ...string) []string {
		return append([]string{"--database-url", testutil.DatabaseURL(), "--schema", b.schema, "relay", "--sink", "stdout:",
			"--relay-id", id, "--poll-interval", "50ms", "--heartbeat-interval", "1s", "--log-level", "warn"}, args...)
	}
	ordered := start(t, nil, relay("cli-ordered", "--ordering", "aggregate")...)
	testutil.WaitFor(t, 30*time.Second, "the ordered relay listed", func() bool {
		relays, err := b.mgr.Relays(b.ctx)
		require.NoError(t, err)
		return len(relays) == 1
	})
	res := outboxCmd(t, b.schema, "stats")
	requireOK(t, res)
	require.Regexp(t, `cli-ordered\s+idle, stdout.*ordering aggregate \(block\), leases partitions`, res.stdout)

	res = run(t, nil, relay("cli-unordered")...)
	requireFail(t, res, 1, `relay "cli-ordered" (host `, "delivers with ordering aggregate, ordered failure block, leases partitions",
		"this relay would deliver with ordering none, leases rows", "every relay of a schema must deliver the same way")

	require.Equal(t, 0, ordered.stop(t, syscall.SIGTERM))
	unordered := start(t, nil, relay("cli-unordered")...)
	testutil.WaitFor(t, 30*time.Second, "the unordered relay listed", func() bool {
		relays, err := b.mgr.Relays(b.ctx)
		require.NoError(t, err)
		return len(relays) == 1 && relays[0].RelayID == "cli-unordered" && relays[0].Ordering == outbox.OrderingNone
	})
	require.Equal(t, 0, unordered.stop(t, syscall.SIGTERM))
}
