package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
)

// receiver is a webhook consumer that counts the deliveries of each event
// ID (ce-id) it acknowledged.
type receiver struct {
	*httptest.Server
	mu  sync.Mutex
	got map[int64]int
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	rc := &receiver{got: map[int64]int{}}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id, err := strconv.ParseInt(r.Header.Get("ce-id"), 10, 64)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.got[id]++
		rc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// counts returns a copy of the deliveries per ID, and resets them.
func (rc *receiver) take() map[int64]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := rc.got
	rc.got = map[int64]int{}
	return out
}

func (rc *receiver) len() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.got)
}

// once is ids, each delivered once.
func once(ids []int64) map[int64]int {
	m := make(map[int64]int, len(ids))
	for _, id := range ids {
		m[id] = 1
	}
	return m
}

// seedDelivered writes n events and makes them delivered: the first
// archived of them moved to outbox_events_archive (as a relay with
// --retention archive does), the rest processed; it also writes a pending
// and a failed event, which a replay leaves out. It returns the delivered
// IDs.
func seedDelivered(t *testing.T, b eventsBundle, n, archived int) []int64 {
	t.Helper()
	ids := b.writeN(t, n)
	b.exec(t, `UPDATE {table} SET status = 'processed', processed_at = now(), updated_at = now() WHERE id = ANY($1)`, ids)
	archive := pgx.Identifier{b.schema, "outbox_events_archive"}.Sanitize()
	b.exec(t, `WITH moved AS (DELETE FROM {table} WHERE id = ANY($1)
    RETURNING id, event_type, aggregate_type, aggregate_id, payload, headers, status, created_at, updated_at, processed_at)
INSERT INTO `+archive+` (id, event_type, aggregate_type, aggregate_id, payload, headers, status, created_at, updated_at, processed_at)
SELECT * FROM moved`, ids[:archived])
	more := b.writeN(t, 2)
	b.setFailed(t, more[1], "boom")
	return ids
}

// rowsState is every row of the table and the archive as a replay must
// leave them.
func rowsState(t *testing.T, b eventsBundle) []string {
	t.Helper()
	var out []string
	for _, table := range []string{"outbox_events", "outbox_events_archive"} {
		rows, err := b.pool.Query(b.ctx, `SELECT format('%s %s %s %s %s', id, status, attempts, updated_at, processed_at)
FROM `+pgx.Identifier{b.schema, table}.Sanitize()+` ORDER BY id`)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		out = append(out, append([]string{table + ":"}, got...)...)
	}
	return out
}

func TestEventsReplayToSink(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seedDelivered(t, b, 30, 12)
	rc := newReceiver(t)
	before := rowsState(t, b)
	sink := rc.URL + "/hooks/new-consumer"

	res := outboxCmd(t, b.schema, "events", "replay", "--sink", sink, "--dry-run")
	requireOK(t, res)
	require.Equal(t, fmt.Sprintf("would publish 30 delivered events to %s/… (dry run: nothing sent)\n", rc.URL), res.stdout)
	res = outboxCmd(t, b.schema, "events", "replay", "--sink", sink, "--dry-run", "--json", "--after-id", fmt.Sprint(ids[9]))
	requireOK(t, res)
	require.JSONEq(t, fmt.Sprintf(`{"dry_run":true,"count":20,"published":0,"sink":"%s/…","after_id":%d,"last_id":0,"up_to_id":0,"complete":false}`, rc.URL, ids[9]), res.stdout)
	require.Zero(t, rc.len(), "a dry run sends nothing")

	res = outboxCmd(t, b.schema, "events", "replay", "--sink", sink, "--yes", "--batch-size", "7")
	requireOK(t, res)
	top := ids[len(ids)-1] + 2 // the pending and the failed event
	require.Equal(t, fmt.Sprintf("published 30 events to %s/…; last ID %d\n", rc.URL, top), res.stdout)
	require.Equal(t, once(ids), rc.take(), "every delivered event exactly once, archived ones included")
	require.Equal(t, before, rowsState(t, b), "status, attempts and timestamps untouched")

	// Filters: an aggregate, a time range; --json.
	res = outboxCmd(t, b.schema, "events", "replay", "--sink", sink, "--aggregate-id", "3", "--json")
	requireOK(t, res)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	require.Equal(t, map[string]any{"count": 1.0, "published": 1.0, "last_id": float64(top), "up_to_id": float64(top), "after_id": 0.0,
		"complete": true, "sink": rc.URL + "/…"}, doc)
	require.Equal(t, once(ids[2:3]), rc.take())

	res = outboxCmd(t, b.schema, "events", "replay", "--sink", sink, "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	requireOK(t, res)
	require.Empty(t, rc.take())
	res = outboxCmd(t, b.schema, "events", "replay", "--sink", sink, "--since", "2020-01-01T00:00:00Z", "--until", time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
		"--type", "order.created", "--rate", "1000")
	requireOK(t, res)
	require.Equal(t, once(ids), rc.take())
	require.Equal(t, before, rowsState(t, b))

	// Without --sink, replay still sends events back to pending.
	res = outboxCmd(t, b.schema, "events", "replay", "--status", "processed", "--aggregate-id", "20")
	requireOK(t, res)
	require.Equal(t, "replayed 1 processed events\n", res.stdout)
	require.Equal(t, outbox.StatusPending, b.event(t, ids[19]).Status)
	require.Empty(t, rc.take())
}

var lastIDLine = regexp.MustCompile(`^published (\d+) events to \S+; last ID (\d+)\n$`)

// An interrupted replay says where it stopped; --after-id resumes it, and
// every event reaches the consumer. SIGTERM stops it gracefully, SIGKILL
// without a word: the consumer's own record then says where to resume.
func TestEventsReplayToSinkResumes(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ids := seedDelivered(t, b, 300, 100)
			rc := newReceiver(t)
			before := rowsState(t, b)
			args := []string{"--database-url", testutil.DatabaseURL(), "--schema", b.schema, "events", "replay",
				"--sink", rc.URL, "--yes", "--rate", "150"}
			p := start(t, nil, args...)
			testutil.WaitFor(t, 30*time.Second, "the replay to publish 60 events", func() bool { return rc.len() >= 60 })
			code := p.stop(t, sig)
			first := rc.take()
			require.Less(t, len(first), len(ids), "the replay was interrupted before the end")

			var resume int64
			if sig == syscall.SIGTERM {
				require.Equal(t, 1, code, "stderr:\n%s", p.stderr.String())
				m := lastIDLine.FindStringSubmatch(p.stdout.String())
				require.NotNil(t, m, "stdout: %q", p.stdout.String())
				resume, _ = strconv.ParseInt(m[2], 10, 64)
				require.Equal(t, fmt.Sprintf("outbox: interrupted: replay stopped after %s events: resume with --after-id %d\n", m[1], resume), p.stderr.String())
				published, _ := strconv.Atoi(m[1])
				require.Len(t, first, published, "the count printed is the count acknowledged")
			} else {
				require.Equal(t, -1, code, "killed")
				// The consumer's record: the highest ID up to which it got
				// every event.
				for _, id := range ids {
					if first[id] == 0 {
						break
					}
					resume = id
				}
			}
			require.Positive(t, resume)
			for _, id := range ids {
				if id <= resume {
					require.Equal(t, 1, first[id], "event %d up to the resume point was delivered", id)
				}
			}

			res := run(t, nil, append(args[:len(args)-2], "--after-id", fmt.Sprint(resume), "--json")...)
			requireOK(t, res)
			require.Contains(t, res.stdout, `"complete":true`)
			second := rc.take()
			after := slices.DeleteFunc(slices.Clone(ids), func(id int64) bool { return id <= resume })
			require.Equal(t, once(after), second, "the resumed run publishes every event after the resume point, once")
			for _, id := range ids {
				require.Positive(t, first[id]+second[id], "event %d reached the consumer", id)
			}
			require.Equal(t, before, rowsState(t, b))
		})
	}
}

func TestEventsReplayToSinkUsage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seedDelivered(t, b, 3, 1)
	rc := newReceiver(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sink", rc.URL}, "sends the whole history"},
		{[]string{"--sink", rc.URL, "--yes", "42"}, "not by ID"},
		{[]string{"--sink", rc.URL, "--yes", "--status", "failed"}, "delivered events only"},
		{[]string{"--sink", rc.URL, "--yes", "--rate", "-1"}, "invalid --rate -1"},
		{[]string{"--sink", rc.URL, "--yes", "--rate", "lots"}, "--rate"},
		{[]string{"--sink", rc.URL, "--yes", "--rate", "inf"}, "invalid --rate +Inf"},
		{[]string{"--sink", rc.URL, "--yes", "--after-id", "-3"}, "invalid --after-id -3"},
		{[]string{"--sink", rc.URL, "--yes", "--batch-size", "0"}, "invalid --batch-size 0"},
		{[]string{"--sink", rc.URL, "--since", "yesterday"}, `invalid --since "yesterday"`},
		{[]string{"--sink", rc.URL, "--since", "2025-01-01T00:00:00Z", "--created-after", "2025-01-01T00:00:00Z"}, "keep one"},
		{[]string{"--sink", rc.URL, "--since", "2025-02-01T00:00:00Z", "--until", "2025-01-01T00:00:00Z"}, "--until: must be later than --since"},
		{[]string{"--sink", "bogus://x", "--yes"}, `unknown sink scheme "bogus"`},
		{[]string{"--sink", "bogus://x", "--yes", "--dry-run"}, `unknown sink scheme "bogus"`},
		{[]string{"--sink", "", "--yes"}, "invalid --sink: is empty"},
		{[]string{"--sink", rc.URL, "--yes", "--route", "{nope"}, "--route"},
		{[]string{"--status", "processed", "--type", "x", "--rate", "5"}, "--rate goes with --sink"},
		{[]string{"--status", "processed", "--type", "x", "--since", "2025-01-01T00:00:00Z"}, "--since goes with --sink"},
		{[]string{"--status", "processed", "--type", "x", "--after-id", "7"}, "--after-id goes with --sink"},
	} {
		res := outboxCmd(t, b.schema, append([]string{"events", "replay"}, tc.args...)...)
		requireFail(t, res, 2, tc.want)
		require.Empty(t, res.stdout, "%v", tc.args)
	}
	require.Zero(t, rc.len())
	// A sink that refuses is a runtime failure: exit 1, one line, with
	// where to resume.
	res := outboxCmd(t, b.schema, "events", "replay", "--sink", "http://127.0.0.1:1/x", "--yes", "--sink-timeout", "1s")
	requireFail(t, res, 1, "resume with --after-id 0")
	require.True(t, strings.HasPrefix(res.stdout, "published 0 events to http://127.0.0.1:1/…; last ID 0"), res.stdout)
}

// The dashboard replays to the sink outbox admin was started with, and to
// no other: the count first (the confirmation), then the replay.
func TestAdminReplayToSink(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seedDelivered(t, b, 5, 2)
	rc := newReceiver(t)
	before := rowsState(t, b)
	_, base := startAdmin(t, testutil.DatabaseURL(), b.schema, nil, "--addr", "127.0.0.1:0", "--replay-sink", rc.URL+"/hooks")
	code, body := adminGet(t, base+"api/info")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"replay_sink": "`+rc.URL+`/…"`)

	post := func(body string) (int, map[string]any) {
		req, err := http.NewRequest(http.MethodPost, base+"api/events/replay-to-sink", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		var doc map[string]any
		require.NoError(t, json.NewDecoder(res.Body).Decode(&doc))
		return res.StatusCode, doc
	}
	code, doc := post(`{"filter": {}, "dry_run": true}`)
	require.Equal(t, http.StatusOK, code, doc)
	require.EqualValues(t, 5, doc["count"])
	require.Zero(t, rc.len())
	code, doc = post(`{"filter": {}}`)
	require.Equal(t, http.StatusOK, code, doc)
	require.EqualValues(t, 5, doc["published"])
	require.Equal(t, once(ids), rc.take())
	require.Equal(t, before, rowsState(t, b))
	code, doc = post(`{"filter": {}, "sink": "http://127.0.0.1:1/"}`)
	require.Equal(t, http.StatusBadRequest, code, doc)

	res := outboxCmd(t, b.schema, "admin", "--replay-sink", "bogus://x")
	requireFail(t, res, 2, `unknown sink scheme "bogus"`)
}

// The dashboard's button: the event browser's filter, a confirmation with
// the count, then the events at the sink outbox admin was started with.
func TestAdminReplayToSinkInBrowser(t *testing.T) {
	t.Parallel()
	br := newBrowser(t)
	b := setup(t)
	ids := seedDelivered(t, b, 9, 4)
	b.write(t, outbox.Message{EventType: "invoice.sent", AggregateType: "invoice", AggregateID: "I-1", Payload: map[string]int{}})
	b.exec(t, `UPDATE {table} SET status = 'processed', processed_at = now() WHERE event_type = 'invoice.sent'`)
	rc := newReceiver(t)
	_, base := startAdmin(t, testutil.DatabaseURL(), b.schema, nil, "--addr", "127.0.0.1:0", "--replay-sink", rc.URL)

	br.do("open the event browser", chromedp.Navigate(base+"#/events?type=order.created"))
	br.waitJS("the replay button", `document.querySelector('#replay-to-sink') !== null`)
	br.click("#replay-to-sink")
	br.waitJS("the confirmation", `document.querySelector('#dialog').open`)
	require.Equal(t, "Replay 9 delivered events to "+rc.URL+"?", br.text("#dialog-title"))
	require.Zero(t, rc.len(), "nothing sent before the confirmation")
	br.screenshot("admin-replay-to-sink")
	br.click("#dialog-ok")
	testutil.WaitFor(t, 20*time.Second, "the events at the sink", func() bool { return rc.len() == len(ids) })
	br.waitJS("the toast", `document.body.innerText.includes('Published 9 events to `+rc.URL+`')`)
	require.Equal(t, once(ids), rc.take(), "the filter's events only, each once")
}
