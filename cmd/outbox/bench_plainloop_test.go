package main_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
)

// A webhook --sink makes drain run the plain claim/POST/mark loop beside it
// and report plain_loop_events_per_s and ratio_to_plain_loop; the loop
// POSTs every event once, one request each.
func TestBenchWebhookPlainLoop(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		plain = map[int64]int{}
		other int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		// The plain loop sends Go's own User-Agent; the webhook sink its own.
		if strings.HasPrefix(r.UserAgent(), "Go-http-client") {
			id, err := strconv.ParseInt(r.Header.Get("Webhook-Id"), 10, 64)
			if err == nil {
				plain[id]++
			}
		} else {
			other++
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	prefix := benchPrefix(t)
	args := []string{"--database-url", testutil.DatabaseURL(), "bench", "--events", "300", "--batch-size", "100",
		"--schema-prefix", prefix, "--sink", srv.URL + "/hook", "--sink-concurrency", "4", "drain"}
	res := run(t, nil, append(args, "--json")...)
	requireBenchOK(t, res)
	var doc struct {
		Scenarios []map[string]any `json:"scenarios"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
	require.Len(t, doc.Scenarios, 1)
	drain := doc.Scenarios[0]
	require.Equal(t, "drain", drain["scenario"])
	require.Positive(t, drain["plain_loop_events_per_s"])
	require.InDelta(t, drain["events_per_s"].(float64)/drain["plain_loop_events_per_s"].(float64), drain["ratio_to_plain_loop"], 1e-9)

	mu.Lock()
	require.Len(t, plain, 300, "the plain loop POSTed every event")
	for id, n := range plain {
		require.Equal(t, 1, n, "event %d POSTed once by the plain loop", id)
	}
	require.Equal(t, 600, other, "the webhook sink's requests: one per event from the reference loop and one from the drain")
	mu.Unlock()

	res = run(t, nil, args...)
	requireBenchOK(t, res)
	require.Contains(t, res.stdout, "drain/plain loop")
	require.Contains(t, res.stdout, "claim/POST/mark loop")
	require.Empty(t, schemasWithPrefix(t, prefix))
}
