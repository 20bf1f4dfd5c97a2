package bench_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/cmd/outbox/internal/bench"
)

// With PlainLoopURL, the drain reports the plain claim/POST/mark loop
// beside it, and the loop POSTs every event exactly once, one request per
// event, to the receiver.
func TestPlainLoopBesideDrain(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		posts  = map[int64]int{}
		bodies int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.Header.Get("Webhook-Id"), 10, 64)
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		if err == nil && r.Method == http.MethodPost {
			posts[id]++
		}
		if len(body) > 0 {
			bodies++
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	const events = 730
	// The drain goes to a counting sink, so every request the receiver
	// gets is the plain loop's.
	b := setup(t, postgres, bench.Config{Events: events, BatchSize: 100, Sink: &countingSink{},
		PlainLoopURL: srv.URL, PlainLoopConcurrency: 4})
	res, err := b.runner.Run(b.ctx, []bench.Scenario{bench.ScenarioDrain})
	require.NoError(t, err)
	require.Len(t, res.Scenarios, 1)
	d := res.Scenarios[0]
	require.Equal(t, bench.ScenarioDrain, d.Scenario)
	require.Positive(t, d.PlainLoopEventsPerS)
	require.InDelta(t, d.EventsPerS/d.PlainLoopEventsPerS, d.RatioToPlainLoop, 1e-9)

	mu.Lock()
	require.Len(t, posts, events, "every event POSTed")
	for id := int64(1); id <= events; id++ {
		require.Equal(t, 1, posts[id], "event %d POSTed once", id)
	}
	require.Equal(t, events, bodies, "each request carries the payload")
	mu.Unlock()

	raw, err := json.Marshal(d)
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(raw, &fields))
	require.Contains(t, fields, "plain_loop_events_per_s")
	require.Contains(t, fields, "ratio_to_plain_loop")
	require.Empty(t, b.scratches(t))
}

// Without PlainLoopURL the fields are absent.
func TestNoPlainLoopWithoutURL(t *testing.T) {
	t.Parallel()
	b := setup(t, postgres, bench.Config{Events: 200})
	res, err := b.runner.Run(b.ctx, []bench.Scenario{bench.ScenarioDrain})
	require.NoError(t, err)
	raw, err := json.Marshal(res.Scenarios[0])
	require.NoError(t, err)
	require.NotContains(t, string(raw), "plain_loop")
}

// A PlainLoopURL that is not http(s) is refused.
func TestPlainLoopURLValidated(t *testing.T) {
	t.Parallel()
	err := bench.Config{PlainLoopURL: "nats://localhost:4222"}.WithDefaults().Validate()
	var ce *bench.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "PlainLoopURL", ce.Field)
}
