package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
)

// webhookServer records the CloudEvents it receives.
type webhookServer struct {
	*httptest.Server
	mu       sync.Mutex
	received map[int64]int // event ID -> deliveries
	bad      []string      // requests missing what the sink must send
}

func newWebhookServer(t *testing.T) *webhookServer {
	t.Helper()
	s := &webhookServer{received: map[int64]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, err := strconv.ParseInt(r.Header.Get("ce-id"), 10, 64)
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case err != nil:
			s.bad = append(s.bad, "ce-id: "+r.Header.Get("ce-id"))
		case r.Header.Get("ce-type") != "order.created" || r.Header.Get("ce-source") != "/cli-test":
			s.bad = append(s.bad, fmt.Sprintf("event %d: ce-type %q ce-source %q", id, r.Header.Get("ce-type"), r.Header.Get("ce-source")))
		case r.Header.Get("webhook-signature") == "":
			s.bad = append(s.bad, fmt.Sprintf("event %d: unsigned", id))
		case !json.Valid(body):
			s.bad = append(s.bad, fmt.Sprintf("event %d: body %q", id, body))
		}
		s.received[id]++
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *webhookServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.received)
}

func TestRelayWebhookUntilSIGTERM(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 25
	ids := b.writeN(t, n)
	srv := newWebhookServer(t)
	const password, secret = "RelayDbPassw0rd", "TopSecretHmacKey123"
	// application_name holds at most 63 bytes: keep the ID short.
	relayID := "cli-test-" + b.schema[len(b.schema)-8:]

	p := start(t, []string{"OUTBOX_WEBHOOK_SECRET=" + secret},
		"--database-url", withPassword(t, password), "--schema", b.schema, "--log-format", "json", "--log-level", "debug",
		"relay", "--sink", srv.URL+"/hook", "--source", "/cli-test", "--poll-interval", "50ms", "--batch-size", "10",
		"--relay-id", relayID, "--summary-interval", "100ms")

	testutil.WaitFor(t, 30*time.Second, "every event delivered and processed", func() bool {
		require.False(t, p.exited(), "relay exited early; stderr:\n%s", p.stderr.String())
		return srv.count() == n && b.stats(t).Processed == n
	})
	// The relay names its connections.
	var conns int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`,
		"outbox-relay:"+relayID).Scan(&conns))
	require.Positive(t, conns)
	testutil.WaitFor(t, 10*time.Second, "a summary of the deliveries", func() bool {
		return strings.Contains(p.stderr.String(), `"msg":"relay summary"`)
	})

	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), "stderr:\n%s", p.stderr.String())

	s := b.stats(t)
	require.Zero(t, s.Processing)
	require.Zero(t, s.Pending)
	require.Equal(t, int64(n), s.Processed)
	srv.mu.Lock()
	require.Empty(t, srv.bad)
	for _, id := range ids {
		require.Positive(t, srv.received[id], "event %d not delivered", id)
	}
	srv.mu.Unlock()
	require.Equal(t, relayID, b.event(t, ids[0]).LockedBy)

	logs := p.stderr.String()
	require.NotContains(t, logs, password)
	require.NotContains(t, logs, secret)
	require.Empty(t, p.stdout.String())
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), "--log-format json: %q", line)
		msgs = append(msgs, fmt.Sprint(rec["msg"]))
	}
	require.Contains(t, msgs, "relay started")
	require.Contains(t, msgs, "relay stopped")
	signal := slices.Index(msgs, "shutdown signal received; finishing in-flight batches, up to --shutdown-timeout")
	require.Positive(t, signal, "the first signal is logged")
	require.Less(t, signal, slices.Index(msgs, "relay stopped"))
	published := 0
	for line := range strings.Lines(logs) {
		var rec struct {
			Msg       string `json:"msg"`
			Published int    `json:"published"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		if rec.Msg == "relay summary" {
			published += rec.Published
		}
	}
	require.Equal(t, n, published, "the summaries add up to what was published")
}

func TestRelayStdoutUntilSIGINT(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.writeN(t, 3)

	p := start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", b.schema,
		"relay", "--sink", "stdout:", "--poll-interval", "50ms", "--lease", "2s")
	testutil.WaitFor(t, 30*time.Second, "every event processed", func() bool {
		require.False(t, p.exited(), "relay exited early; stderr:\n%s", p.stderr.String())
		return b.stats(t).Processed == int64(len(ids))
	})
	require.Equal(t, 0, p.stop(t, os.Interrupt), "stderr:\n%s", p.stderr.String())

	lines := strings.Split(strings.TrimSpace(p.stdout.String()), "\n")
	require.Len(t, lines, len(ids))
	for i, line := range lines {
		var ev struct {
			ID          int64          `json:"id"`
			EventType   string         `json:"event_type"`
			AggregateID string         `json:"aggregate_id"`
			Payload     map[string]int `json:"payload"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &ev))
		require.Equal(t, ids[i], ev.ID)
		require.Equal(t, "order.created", ev.EventType)
		require.Equal(t, i+1, ev.Payload["n"])
	}
	require.Contains(t, p.stderr.String(), `msg="relay stopped"`)
	require.Zero(t, b.stats(t).Processing)
}
