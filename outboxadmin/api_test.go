package outboxadmin_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxadmin"
)

func TestSearchFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t)
	// Event 2 was created a day ago, so time ranges can tell it apart.
	b.exec(t, `UPDATE {table} SET created_at = now() - interval '1 day' WHERE id = $1`, ids[2])
	hourAgo := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))

	tests := []struct {
		name  string
		query string
		want  []int64
	}{
		{"all", "", []int64{ids[6], ids[5], ids[4], ids[3], ids[2], ids[1], ids[0]}},
		{"status failed", "status=failed", []int64{ids[5], ids[4]}},
		{"status processed", "status=processed", []int64{ids[0]}},
		{"status pending", "status=pending", []int64{ids[6], ids[3], ids[2], ids[1]}},
		{"retrying", "status=pending&min_attempts=1", []int64{ids[6]}},
		{"type", "type=order.created", []int64{ids[4], ids[2], ids[0]}},
		{"aggregate type", "aggregate_type=invoice", []int64{ids[3]}},
		{"aggregate id", "aggregate_id=A-1", []int64{ids[1], ids[0]}},
		{"aggregate", "aggregate_type=order&aggregate_id=A-3", []int64{ids[5], ids[4]}},
		{"idempotency key", "idempotency_key=inv-9", []int64{ids[3]}},
		{"created before", "created_before=" + hourAgo, []int64{ids[2]}},
		{"created after", "created_after=" + hourAgo + "&type=order.created", []int64{ids[4], ids[0]}},
		{"combined", "type=order.paid&status=failed", []int64{ids[5]}},
		{"none", "type=nothing", []int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var res outboxadmin.EventsJSON
			b.getJSON(t, "/api/events?"+tt.query, &res)
			require.Equal(t, tt.want, idsOf(res.Events))
			require.Nil(t, res.NextBeforeID)
			for _, e := range res.Events {
				require.Nil(t, e.Payload, "search results leave the payload out")
			}
		})
	}
}

func TestSearchKeysetPaging(t *testing.T) {
	t.Parallel()
	b := setup(t)
	msgs := make([]outbox.Message, 7)
	for i := range msgs {
		msgs[i] = outbox.Message{EventType: "e", Payload: i}
	}
	ids := b.write(t, msgs...)

	var pages [][]int64
	next := ""
	for range 10 {
		var res outboxadmin.EventsJSON
		b.getJSON(t, "/api/events?limit=3"+next, &res)
		pages = append(pages, idsOf(res.Events))
		if res.NextBeforeID == nil {
			break
		}
		next = "&before_id=" + jsonNumber(*res.NextBeforeID)
	}
	require.Equal(t, [][]int64{{ids[6], ids[5], ids[4]}, {ids[3], ids[2], ids[1]}, {ids[0]}}, pages)

	// A page that ends exactly at the last event says there is no more.
	var res outboxadmin.EventsJSON
	b.getJSON(t, "/api/events?limit=3&before_id="+jsonNumber(ids[3]), &res)
	require.Equal(t, []int64{ids[2], ids[1], ids[0]}, idsOf(res.Events))
	require.Nil(t, res.NextBeforeID)
}

func jsonNumber(n int64) string {
	data, _ := json.Marshal(n)
	return string(data)
}

func TestSearchRejectsBadParameters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct{ query, want string }{
		{"status=done", `invalid status "done": use pending, processing, processed or failed`},
		{"limit=0", `invalid limit "0": use a whole number from 1 to 1000`},
		{"limit=5000", `invalid limit "5000"`},
		{"before_id=abc", `invalid before_id "abc"`},
		{"created_after=yesterday", `invalid created_after "yesterday": use an RFC 3339 time`},
		{"min_attempts=-1", `invalid min_attempts "-1"`},
		{"created_after=2025-02-01T00:00:00Z&created_before=2025-01-01T00:00:00Z", "created_before: must be later than created_after"},
	}
	for _, tt := range tests {
		res := b.get(t, "/api/events?"+tt.query)
		require.Equal(t, http.StatusBadRequest, res.code, tt.query)
		require.Contains(t, res.errorText(t), tt.want)
	}
}

func TestEventDetail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t)

	res := b.get(t, path("/api/events/%d", ids[3]))
	require.Equal(t, http.StatusOK, res.code)
	// The payload is the stored JSON, its big number intact.
	require.Contains(t, res.body, `"total": 12345678901234567890`)
	var e outboxadmin.EventJSON
	res.decode(t, &e)
	require.Equal(t, ids[3], e.ID)
	require.Equal(t, "invoice.sent", e.EventType)
	require.Equal(t, "invoice", e.AggregateType)
	require.Equal(t, "I-9", e.AggregateID)
	require.Equal(t, "inv-9", e.IdempotencyKey)
	require.Equal(t, outbox.StatusPending, e.Status)
	require.Equal(t, map[string]string{"tenant": "acme", "correlation_id": "corr-9"}, e.Headers)
	require.JSONEq(t, `{"total": 12345678901234567890, "lines": [1, 2]}`, string(e.Payload))
	require.WithinDuration(t, time.Now(), e.CreatedAt, time.Minute)
	require.Nil(t, e.ProcessedAt)

	var failed outboxadmin.EventJSON
	b.getJSON(t, path("/api/events/%d", ids[5]), &failed)
	require.Equal(t, outbox.StatusFailed, failed.Status)
	require.Equal(t, 5, failed.Attempts)
	require.Equal(t, "webhook answered 422: unknown customer", failed.LastError)

	var processed outboxadmin.EventJSON
	b.getJSON(t, path("/api/events/%d", ids[0]), &processed)
	require.NotNil(t, processed.ProcessedAt)

	res = b.get(t, "/api/events/999999")
	require.Equal(t, http.StatusNotFound, res.code)
	require.Equal(t, "event not found: 999999", res.errorText(t))
	res = b.get(t, "/api/events/x1")
	require.Equal(t, http.StatusBadRequest, res.code)
	require.Equal(t, `invalid event ID "x1": use a positive integer`, res.errorText(t))
}

func TestRetry(t *testing.T) {
	t.Parallel()
	t.Run("one and a selection", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.seed(t)
		var res outboxadmin.ActionResultJSON
		b.postJSON(t, "/api/events/retry", map[string]any{"ids": []int64{ids[4]}}, &res)
		require.Equal(t, outboxadmin.ActionResultJSON{Count: 1, Changed: []int64{ids[4]}}, res)
		e := b.event(t, ids[4])
		require.Equal(t, outbox.StatusPending, e.Status)
		require.Zero(t, e.Attempts)

		// A selection with an event that is not failed (any more) reports it.
		b.postJSON(t, "/api/events/retry", map[string]any{"ids": []int64{ids[5], ids[4], 999999}}, &res)
		require.Equal(t, outboxadmin.ActionResultJSON{Count: 1, Changed: []int64{ids[5]}, Unchanged: []int64{ids[4], 999999}}, res)
		require.Equal(t, outbox.StatusPending, b.event(t, ids[5]).Status)
		require.Contains(t, b.logs.String(), `msg="admin action" component=outboxadmin action=retry principal=anonymous remote_addr=127.0.0.1:`)
		require.Contains(t, b.logs.String(), "event_ids=")
	})
	t.Run("all matching a filter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.seed(t)
		var res outboxadmin.ActionResultJSON
		b.postJSON(t, "/api/events/retry", map[string]any{"filter": map[string]any{"type": "order.paid"}}, &res)
		require.Equal(t, int64(1), res.Count)
		require.Equal(t, outbox.StatusPending, b.event(t, ids[5]).Status)
		require.Equal(t, outbox.StatusFailed, b.event(t, ids[4]).Status, "another type stays failed")

		b.postJSON(t, "/api/events/retry", map[string]any{"filter": map[string]any{}}, &res)
		require.Equal(t, int64(1), res.Count)
		require.Equal(t, outbox.StatusPending, b.event(t, ids[4]).Status)
		require.Equal(t, outbox.StatusProcessed, b.event(t, ids[0]).Status, "retry leaves processed events alone")
		require.Contains(t, b.logs.String(), "action=retry")
		require.Contains(t, b.logs.String(), "count=1")
	})
}

func TestReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t)
	b.setProcessed(t, ids[1])
	b.setProcessed(t, ids[2])

	var res outboxadmin.ActionResultJSON
	b.postJSON(t, "/api/events/replay", map[string]any{"ids": []int64{ids[0], ids[4]}}, &res)
	require.Equal(t, outboxadmin.ActionResultJSON{Count: 1, Changed: []int64{ids[0]}, Unchanged: []int64{ids[4]}}, res)
	e := b.event(t, ids[0])
	require.Equal(t, outbox.StatusPending, e.Status)
	require.True(t, e.ProcessedAt.IsZero())

	b.postJSON(t, "/api/events/replay", map[string]any{"filter": map[string]any{"aggregate_id": "A-2"}}, &res)
	require.Equal(t, int64(1), res.Count)
	require.Equal(t, outbox.StatusPending, b.event(t, ids[2]).Status)
	require.Equal(t, outbox.StatusProcessed, b.event(t, ids[1]).Status)
	require.Contains(t, b.logs.String(), "action=replay")
}

func TestDiscard(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t)
	b.exec(t, `UPDATE {table} SET status = 'processing', locked_by = 'relay-1', locked_until = now() + interval '1 minute' WHERE id = $1`, ids[1])

	var res outboxadmin.ActionResultJSON
	b.postJSON(t, "/api/events/discard", map[string]any{"ids": []int64{ids[6], ids[1], ids[0]}, "reason": "  poison message  "}, &res)
	require.Equal(t, outboxadmin.ActionResultJSON{Count: 1, Changed: []int64{ids[6]}, Unchanged: []int64{ids[0], ids[1]}}, res)
	e := b.event(t, ids[6])
	require.Equal(t, outbox.StatusFailed, e.Status)
	require.Equal(t, "discarded by anonymous: poison message", e.LastError)
	require.Equal(t, 2, e.Attempts)
	require.Equal(t, outbox.StatusProcessing, b.event(t, ids[1]).Status, "a relay is publishing it")
	require.Contains(t, b.logs.String(), `action=discard`)
	require.Contains(t, b.logs.String(), `reason="poison message"`)

	// A dead-lettered event is discarded once (it then no longer holds
	// back an ordered aggregate); a discarded one is left as it is.
	b.postJSON(t, "/api/events/discard", map[string]any{"ids": []int64{ids[4]}, "reason": "dead head"}, &res)
	require.Equal(t, []int64{ids[4]}, res.Changed)
	require.Equal(t, "discarded by anonymous: dead head", b.event(t, ids[4]).LastError)
	var again outboxadmin.ActionResultJSON
	b.postJSON(t, "/api/events/discard", map[string]any{"ids": []int64{ids[4], ids[6]}, "reason": "again"}, &again)
	require.Equal(t, outboxadmin.ActionResultJSON{Unchanged: []int64{ids[4], ids[6]}}, again)

	// A NUL in the reason is stored cleaned, not refused by the database.
	b.postJSON(t, "/api/events/discard", map[string]any{"ids": []int64{ids[2]}, "reason": "bad\u0000byte"}, &res)
	require.Equal(t, []int64{ids[2]}, res.Changed)
	require.Equal(t, "discarded by anonymous: bad\uFFFDbyte", b.event(t, ids[2]).LastError)

	for _, body := range []map[string]any{
		{"ids": []int64{ids[2]}},
		{"ids": []int64{ids[2]}, "reason": " "},
	} {
		r := b.post(t, "/api/events/discard", body)
		require.Equal(t, http.StatusBadRequest, r.code)
		require.Contains(t, r.errorText(t), "say why the events are discarded")
	}
	r := b.post(t, "/api/events/discard", map[string]any{"filter": map[string]any{}, "reason": "x"})
	require.Equal(t, http.StatusBadRequest, r.code)
	require.Equal(t, `name the events: {"ids": [1, 2]}`, r.errorText(t))
}

func TestSetMaxAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t)

	var e outboxadmin.EventJSON
	b.postJSON(t, path("/api/events/%d/max-attempts", ids[6]), map[string]any{"max_attempts": 12}, &e)
	require.Equal(t, 12, e.MaxAttempts)
	require.Equal(t, 12, b.event(t, ids[6]).MaxAttempts)
	require.Contains(t, b.logs.String(), "action=set_max_attempts")
	require.Contains(t, b.logs.String(), "max_attempts=12")

	b.postJSON(t, path("/api/events/%d/max-attempts", ids[6]), map[string]any{"max_attempts": 0}, &e)
	require.Zero(t, e.MaxAttempts, "0 restores the relay's default")
	require.Zero(t, b.event(t, ids[6]).MaxAttempts)

	tests := []struct {
		path string
		body any
		code int
		want string
	}{
		{path("/api/events/%d/max-attempts", ids[6]), map[string]any{"max_attempts": -1}, http.StatusBadRequest, "invalid max_attempts: is -1"},
		{path("/api/events/%d/max-attempts", ids[6]), map[string]any{}, http.StatusBadRequest, `send {"max_attempts": N}`},
		{path("/api/events/%d/max-attempts", ids[6]), map[string]any{"max_attempts": "3"}, http.StatusBadRequest, `send {"max_attempts": N}`},
		{"/api/events/999999/max-attempts", map[string]any{"max_attempts": 3}, http.StatusNotFound, "event not found: 999999"},
	}
	for _, tt := range tests {
		r := b.post(t, tt.path, tt.body)
		require.Equal(t, tt.code, r.code, r.body)
		require.Contains(t, r.errorText(t), tt.want)
	}
}

func TestActionRejectsBadBodies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		body any
		want string
	}{
		{map[string]any{}, `name the events: {"ids": [1, 2]} or {"filter": {…}} ({"filter": {}} for all)`},
		{map[string]any{"ids": []int64{1}, "filter": map[string]any{}}, "pass ids or filter, not both"},
		{map[string]any{"ids": []int64{0}}, "invalid event ID 0: use positive integers"},
		{map[string]any{"idz": []int64{1}}, `invalid JSON body: json: unknown field "idz"`},
		{map[string]any{"filter": map[string]any{"min_attempts": -2}}, "invalid min_attempts: is -2"},
		{map[string]any{"ids": make([]int64, 10001)}, "10001 IDs: name at most 10000 per request"},
	}
	for _, tt := range tests {
		r := b.post(t, "/api/events/retry", tt.body)
		require.Equal(t, http.StatusBadRequest, r.code, r.body)
		require.Contains(t, r.errorText(t), tt.want)
	}
	r := b.post(t, "/api/events/retry", map[string]any{"ids": make([]int64, 700000)})
	require.Equal(t, http.StatusRequestEntityTooLarge, r.code)
	require.Contains(t, r.errorText(t), "request body too large")

	r = b.get(t, "/api/nothing")
	require.Equal(t, http.StatusNotFound, r.code)
	require.Equal(t, "no API endpoint GET /api/nothing: see docs/admin.md for the API", r.errorText(t))
	r = b.get(t, "/api/events/retry")
	require.Equal(t, http.StatusBadRequest, r.code, "GET of an action is the event detail of ID \"retry\"")
}

func TestRelays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t)
	var res outboxadmin.RelaysJSON
	b.getJSON(t, "/api/relays", &res)
	require.Empty(t, res.Relays)

	b.exec(t, `UPDATE {table} SET status = 'processing', locked_by = 'relay-a', locked_until = now() + interval '30 seconds' WHERE id = ANY($1)`, ids[1:3])
	b.exec(t, `UPDATE {table} SET status = 'processing', locked_by = 'relay-b', locked_until = now() - interval '5 seconds' WHERE id = $1`, ids[3])
	b.getJSON(t, "/api/relays", &res)
	require.Len(t, res.Relays, 2)
	a, dead := res.Relays[0], res.Relays[1]
	require.Equal(t, "relay-a", a.RelayID)
	require.False(t, a.Heartbeat, "seen through its leases only")
	require.Equal(t, int64(2), a.Events)
	require.False(t, a.Expired)
	require.WithinDuration(t, time.Now().Add(30*time.Second), *a.LastLeaseEnd, 10*time.Second)
	require.Equal(t, "relay-b", dead.RelayID)
	require.Equal(t, int64(1), dead.Events)
	require.True(t, dead.Expired)

	// An idle relay: a heartbeat row and no leases.
	b.exec(t, `INSERT INTO "`+b.schema+`".outbox_relays (relay_id, host, pid, version, sink, event_types, started_at, last_seen, expires_at)
VALUES ('relay-0', 'web-1', 4242, 'v1.2.3', 'stdout:', 'order.*', now(), now(), now() + interval '45 seconds')`)
	b.getJSON(t, "/api/relays", &res)
	require.Len(t, res.Relays, 3)
	idle := res.Relays[0]
	require.Equal(t, "relay-0", idle.RelayID)
	require.True(t, idle.Heartbeat)
	require.False(t, idle.Stale)
	require.Equal(t, "web-1", idle.Host)
	require.Equal(t, 4242, idle.PID)
	require.Equal(t, "stdout:", idle.Sink)
	require.Equal(t, []string{"order.*"}, idle.EventTypes)
	require.Zero(t, idle.Events)
	require.Nil(t, idle.FirstLeaseEnd)
	require.Nil(t, idle.LastClaimAt)
}

func TestHealth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t)
	b.exec(t, `ANALYZE {table}`)
	var res outboxadmin.HealthJSON
	b.getJSON(t, "/api/health", &res)
	require.GreaterOrEqual(t, len(res.Tables), 1)
	events := res.Tables[0]
	require.Equal(t, "outbox_events", events.Table)
	require.NotNil(t, events.Bytes)
	require.Positive(t, *events.Bytes)
	require.NotNil(t, events.DeadTuples, "PostgreSQL reports dead tuples")
	require.NotNil(t, events.Vacuum)
	require.NotNil(t, events.Vacuum.LastAnalyze, "analyzed above")
	require.NotNil(t, res.VacuumHorizon, "PostgreSQL reports the vacuum horizon")
	require.Nil(t, res.SQLiteFile)
	require.Nil(t, res.InnoDBHistoryLength)

	r := b.get(t, "/api/health")
	require.Contains(t, r.body, `"dead_tuples": `)
	require.Contains(t, r.body, `"innodb_history_length": null`, "unreported figures are null, not left out")
}

func TestStats(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *outboxadmin.Config) { c.SampleInterval = 100 * time.Millisecond })
	b.seed(t)
	// The insert counter reaches the statistics when the writing
	// connection reports them: start once it shows the seven seeded.
	testutil.WaitFor(t, 20*time.Second, "the insert counter to show the seeded events", func() bool {
		s, err := b.mgr.Sample(b.ctx)
		require.NoError(t, err)
		return s.Inserted == 7
	})

	var first outboxadmin.StatsJSON
	b.getJSON(t, "/api/stats", &first)
	require.Equal(t, int64(4), first.Pending)
	require.Equal(t, int64(2), first.Failed)
	require.Zero(t, first.Processing)
	require.Greater(t, first.OldestPendingAgeSeconds, 0.0)
	require.InDelta(t, 0.1, first.SampleIntervalSeconds, 1e-9)
	require.Len(t, first.Series, 1)
	require.Nil(t, first.Series[0].PublishedPerSecond, "no rate without a previous sample")
	require.Zero(t, first.DeadLetterRetryWaiting)
	require.Nil(t, first.DeadLetterRetryNextDue)

	// Three events are written and, of the four pending, two published:
	// pending goes 4 -> 5, so published = written 3 - Δpending 1 = 2,
	// once a sample has seen the counter move.
	ids := b.write(t, outbox.Message{EventType: "e", Payload: 1}, outbox.Message{EventType: "e", Payload: 2},
		outbox.Message{EventType: "e", Payload: 3})
	b.exec(t, `UPDATE {table} SET status = 'processed', processed_at = now() WHERE id = ANY($1)`, []int64{ids[0], ids[1]})
	since := first.Series[0].T
	var points []outboxadmin.PointJSON
	deadline := time.Now().Add(20 * time.Second)
	for {
		var next outboxadmin.StatsJSON
		b.getJSON(t, "/api/stats?since="+jsonNumber(since), &next)
		for _, p := range next.Series {
			require.Greater(t, p.T, since, "since returns only newer points")
			since = p.T
		}
		points = append(points, next.Series...)
		written, published := totals(append([]outboxadmin.PointJSON{first.Series[0]}, points...))
		if written > 2.5 {
			// Rates times millisecond timestamps: close, not exact.
			require.InDelta(t, 3, written, 0.1)
			require.InDelta(t, 2, published, 0.1)
			require.Equal(t, int64(5), next.Pending)
			break
		}
		require.False(t, time.Now().After(deadline), "the insert counter never showed the 3 writes")
		time.Sleep(50 * time.Millisecond)
	}
}

// totals integrates the rates of a series back into event counts.
func totals(series []outboxadmin.PointJSON) (written, published float64) {
	for i := 1; i < len(series); i++ {
		secs := float64(series[i].T-series[i-1].T) / 1000
		written += *series[i].WrittenPerSecond * secs
		published += *series[i].PublishedPerSecond * secs
	}
	return written, published
}

func TestPagesAndAssets(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *outboxadmin.Config) { c.BasePath = "/admin/outbox" })
	res := b.get(t, "/admin/outbox/")
	require.Equal(t, http.StatusOK, res.code)
	require.Equal(t, "text/html; charset=utf-8", res.header.Get("Content-Type"))
	require.Contains(t, res.body, `<script src="assets/app.js" defer></script>`)
	require.Contains(t, res.header.Get("Content-Security-Policy"), "default-src 'none'; script-src 'self'")
	require.Equal(t, "DENY", res.header.Get("X-Frame-Options"))
	require.Equal(t, "nosniff", res.header.Get("X-Content-Type-Options"))
	for _, asset := range []string{"app.js", "app.css", "favicon.svg"} {
		r := b.get(t, "/admin/outbox/assets/"+asset)
		require.Equal(t, http.StatusOK, r.code, asset)
		require.NotEmpty(t, r.body)
	}
	require.Contains(t, b.get(t, "/admin/outbox/assets/app.js").header.Get("Content-Type"), "javascript")
	require.Equal(t, http.StatusNotFound, b.get(t, "/admin/outbox/assets/../handler.go").code)
	require.Equal(t, http.StatusNotFound, b.get(t, "/admin/outbox/assets/missing.js").code)
	require.Equal(t, http.StatusNotFound, b.get(t, "/api/stats").code, "outside the base path")

	var st outboxadmin.StatsJSON
	b.getJSON(t, "/admin/outbox/api/stats", &st)
	// No page or asset uses a URL outside the handler (no CDN).
	for _, asset := range []string{"/admin/outbox/", "/admin/outbox/assets/app.js", "/admin/outbox/assets/app.css"} {
		body := b.get(t, asset).body
		for _, ref := range []string{"http://", "https://", "//cdn"} {
			require.NotContains(t, strings.ReplaceAll(body, "http://www.w3.org/2000/svg", ""), ref, asset)
		}
	}
}

// GET /api/blocked-aggregates lists the aggregates held behind a failed
// first event, for the block policy or the skip one; discarding the head
// releases the aggregate.
func TestBlockedAggregates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t) // ids[4] and ids[5] failed

	var res outboxadmin.BlockedAggregatesJSON
	b.getJSON(t, "/api/blocked-aggregates", &res)
	require.Equal(t, outboxadmin.BlockedAggregatesJSON{Supported: true, Policy: "block", BlockedAggregates: outbox.BlockedAggregates{
		Total: 1, Aggregates: []outbox.BlockedAggregate{{AggregateType: "order", AggregateID: "A-3", HeadID: ids[4], HeadStatus: "failed", Waiting: 1}}}}, res)

	b.getJSON(t, "/api/blocked-aggregates?policy=skip&limit=5", &res)
	require.Equal(t, outboxadmin.BlockedAggregatesJSON{Supported: true, Policy: "skip",
		BlockedAggregates: outbox.BlockedAggregates{Aggregates: []outbox.BlockedAggregate{}}}, res)

	var act outboxadmin.ActionResultJSON
	b.postJSON(t, "/api/events/discard", map[string]any{"ids": []int64{ids[4]}, "reason": "dead head"}, &act)
	b.getJSON(t, "/api/blocked-aggregates", &res)
	require.Zero(t, res.Total, "the discarded head holds nothing back")

	for q, want := range map[string]string{
		"policy=sideways": `invalid policy "sideways": use block or skip`,
		"limit=0":         `invalid limit "0": use a whole number from 1 to 1000`,
	} {
		r := b.get(t, "/api/blocked-aggregates?"+q)
		require.Equal(t, http.StatusBadRequest, r.code, q)
		require.Equal(t, want, r.errorText(t), q)
	}
}
