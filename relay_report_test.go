package outbox_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
)

// relayBatches counts the retries of a relay's batches.
type relayBatches struct{ n atomic.Int64 }

func (h *relayBatches) OnBatch(_ context.Context, b outbox.BatchInfo) { h.n.Add(int64(b.Retried)) }
func (h *relayBatches) retried() int64                                { return h.n.Load() }

func TestRelayWarnsOfFailingPublishesAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	addr := closedPort(t)
	serveWebhook(t, addr, func(*http.Request) int { return http.StatusInternalServerError })
	logs := &logBuffer{}
	logs.dumpOnFailure(t)
	b.write(t, 10, nil)
	hook := &relayBatches{}
	b.start(t, outbox.RelayConfig{
		Sink: newWebhookSink(t, addr), BatchSize: 5, MaxAttempts: 1000,
		BackoffBase: 5 * time.Millisecond, BackoffMax: 10 * time.Millisecond,
		SummaryInterval: -1, Logger: logs.logger(), Hooks: []outbox.Hook{hook},
	})
	testutil.WaitFor(t, 20*time.Second, "many failed batches", func() bool { return hook.retried() >= 100 })
	require.True(t, logs.hasLine("level=WARN", `msg="publishes failing"`, "sink=httpsink(http://"+addr+"/hook)", "failed=5",
		"circuit=closed", "last_error=", "answered 500 Internal Server Error"), "the first failures are reported at once")
	require.Equal(t, 1, strings.Count(logs.String(), `msg="publishes failing"`),
		"a hundred failures within 30s make one warning, not one each")
	require.False(t, logs.hasLine(`msg="relay summary"`), "a negative SummaryInterval turns the summary off")
}

func TestRelayLogsAPeriodicSummary(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	addr := closedPort(t)
	// Events 0-2 are delivered; event 3 fails once and is then delivered;
	// event 4 is refused for good (dead-lettered at its first attempt).
	var failedOnce = make(chan struct{}, 1)
	failedOnce <- struct{}{}
	serveWebhook(t, addr, func(r *http.Request) int {
		switch r.Header.Get("ce-subject") {
		case "3":
			select {
			case <-failedOnce:
				return http.StatusServiceUnavailable
			default:
			}
		case "4":
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	logs := &logBuffer{}
	logs.dumpOnFailure(t)
	b.write(t, 5, nil)
	b.start(t, outbox.RelayConfig{
		Sink: newWebhookSink(t, addr), BackoffBase: 5 * time.Millisecond, BackoffMax: 10 * time.Millisecond,
		SummaryInterval: 50 * time.Millisecond, Logger: logs.logger(),
	})
	b.waitStats(t, "four delivered, one dead-lettered", func(s outbox.Stats) bool { return s.Processed == 4 && s.Failed == 1 })
	sum := map[string]int{}
	testutil.WaitFor(t, 10*time.Second, "summaries adding up to every outcome", func() bool {
		clear(sum)
		for line := range strings.Lines(logs.String()) {
			if !strings.Contains(line, `msg="relay summary"`) {
				continue
			}
			require.Contains(t, line, "level=INFO")
			require.Contains(t, line, "interval=50ms")
			for _, f := range strings.Fields(line) {
				k, v, _ := strings.Cut(f, "=")
				if n, err := strconv.Atoi(v); err == nil {
					sum[k] += n
				}
			}
		}
		return sum["published"] == 4 && sum["retried"] == 1 && sum["dead_lettered"] == 1
	})
	require.Zero(t, sum["released"])
	// Two batches (the claim of all five, the retry of event 3) had
	// outcomes; the idle intervals around them log nothing.
	require.LessOrEqual(t, strings.Count(logs.String(), `msg="relay summary"`), 2)
}
