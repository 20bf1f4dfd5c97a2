package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

// Environment of the browser test.
const (
	// envSkipBrowser=1 skips the browser test where Chromium cannot be
	// installed; CI installs it (apt-get install -y chromium).
	envSkipBrowser = "OUTBOX_SKIP_BROWSER"
	// envChromium names the browser binary; default chromium on $PATH.
	envChromium = "OUTBOX_CHROMIUM"
	// envScreenshotDir is where the screenshots go; default
	// $TMPDIR/outbox-screenshots.
	envScreenshotDir = "OUTBOX_SCREENSHOT_DIR"
)

// browser is a headless Chromium driven by chromedp.
type browser struct {
	t    *testing.T
	ctx  context.Context
	shot string // screenshot directory
}

// newBrowser starts Chromium for t, or fails saying how to install it.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	exe := os.Getenv(envChromium)
	if exe == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				exe = p
				break
			}
		}
	}
	if exe == "" {
		if os.Getenv(envSkipBrowser) == "1" {
			t.Skip("Chromium is not installed and " + envSkipBrowser + "=1: skipping the dashboard browser test")
		}
		t.Fatal("Chromium is not installed: run `apt-get update && apt-get install -y chromium` (or set " + envChromium +
			" to a Chrome binary), or set " + envSkipBrowser + "=1 to skip the dashboard browser test")
	}
	dir := os.Getenv(envScreenshotDir)
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "outbox-screenshots")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1366, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithErrorf(func(format string, args ...any) {
		t.Logf("chromedp: "+format, args...)
	}))
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	// Start the browser now, so a broken install fails here.
	require.NoError(t, chromedp.Do(ctx), "start %s", exe)
	t.Logf("screenshots go to %s", dir)
	return &browser{t: t, ctx: ctx, shot: dir}
}

// timeout bounds each step, not the browser (whose first Run must have no
// deadline).
const browserStepTimeout = 30 * time.Second

// fail ends the test with what was asked and the page's text.
func (b *browser) fail(what string, err error) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
	b.t.Fatalf("browser: %s: %v\npage text:\n%s", what, err, text)
}

// do runs steps with a deadline.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.fail(what, err)
	}
}

// get runs one action that returns a value.
func get[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.fail(what, err)
	}
	return v
}

// waitJS waits until the JavaScript expression is true.
func (b *browser) waitJS(what, expr string) {
	b.t.Helper()
	get(b, "wait for "+what, chromedp.Poll[bool](expr,
		chromedp.WithPollingTimeout(25*time.Second), chromedp.WithPollingInterval(50*time.Millisecond)))
}

// text returns the visible text of the first element sel matches.
func (b *browser) text(sel string) string {
	b.t.Helper()
	return get(b, "read "+sel, chromedp.Text(chromedp.CSS(sel)))
}

// click clicks the first element sel matches.
func (b *browser) click(sel string) {
	b.t.Helper()
	b.do("click "+sel, chromedp.Click(chromedp.CSS(sel)))
}

// screenshot saves the viewport as name.png.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	png := get(b, "screenshot "+name, chromedp.CaptureScreenshot())
	path := filepath.Join(b.shot, name+".png")
	require.NoError(b.t, os.WriteFile(path, png, 0o644))
	b.t.Logf("screenshot: %s", path)
}

// html returns the page's whole document.
func (b *browser) html() string {
	b.t.Helper()
	return get(b, "read the page", chromedp.OuterHTML(chromedp.CSS("html")))
}

// waitForSample waits until the admin has a sample newer than since and
// returns its time.
func waitForSample(t *testing.T, base string, since int64) int64 {
	t.Helper()
	var last int64
	testutil.WaitFor(t, 20*time.Second, "a new sample", func() bool {
		code, body := adminGet(t, fmt.Sprintf("%sapi/stats?since=%d", base, since))
		require.Equal(t, http.StatusOK, code, body)
		var st struct{ Series []struct{ T int64 } }
		require.NoError(t, json.Unmarshal([]byte(body), &st))
		if len(st.Series) == 0 {
			return false
		}
		last = st.Series[len(st.Series)-1].T
		return true
	})
	return last
}

// A person opens the dashboard of a real `outbox admin`, finds the failed
// events, retries one, watches a relay publish it, browses and opens events,
// discards a stuck one, and looks at it all on a phone.
func TestAdminDashboardInBrowser(t *testing.T) {
	t.Parallel()
	br := newBrowser(t)
	b := setup(t)

	// Seed: 20 delivered events, 3 dead-lettered, 1 being retried.
	msgs := make([]outbox.Message, 24)
	for i := range msgs {
		msgs[i] = outbox.Message{EventType: []string{"order.created", "order.paid", "invoice.sent"}[i%3],
			AggregateType: "order", AggregateID: fmt.Sprintf("A-%d", 100+i),
			Headers: map[string]string{"tenant": "acme"}, CorrelationID: fmt.Sprintf("corr-%d", i),
			Payload: map[string]any{"order_id": 100 + i, "total_cents": 1999 + i, "items": []map[string]any{{"sku": "BOOK-1", "qty": 2}}}}
	}
	ids := b.write(t, msgs...)
	for _, id := range ids[:20] {
		b.setProcessed(t, id)
	}
	b.setFailed(t, ids[20], "webhook answered 500: upstream unavailable")
	b.setFailed(t, ids[21], "webhook answered 422: unknown customer")
	b.setFailed(t, ids[22], "webhook answered 500: upstream unavailable")
	stuck := ids[23]
	b.exec(t, `UPDATE {table} SET attempts = 3, lease_expiries = 2, last_error = 'timeout after 10s', available_at = now() + interval '1 hour' WHERE id = $1`, stuck)
	retried := ids[21]

	dbURL, dbPassword := databaseURLWithPassword(t)
	admin, base := startAdmin(t, dbURL, b.schema, nil, "--addr", "127.0.0.1:0", "--sample-interval", "500ms")

	// Overview: the cards show the failed events.
	br.do("open the overview", chromedp.Navigate(base))
	br.waitJS("the overview's failed card", `document.querySelector('[data-card^="failed"] .value')?.textContent === '3'`)
	br.waitJS("the failed badge", `document.querySelector('#failed-badge').textContent === '3'`)
	// The tables' health: both tables, with PostgreSQL's figures.
	br.waitJS("the tables panel", `[...document.querySelectorAll('#overview-tables tr[data-table]')].map(r => r.dataset.table).join() ===
		'outbox_events,outbox_events_archive'`)
	text := br.text("#overview-tables")
	require.Regexp(t, `outbox_events\s+\S+\s+\d+\s+\d+(\.\d)? [KM]iB`, text)
	require.Contains(t, text, "Vacuum horizon")
	br.waitJS("no consumers panel without an inbox", `document.querySelector('#overview-consumers')?.hidden === true`)
	require.NotContains(t, br.text("main"), "null", "nothing renders a missing section as text")
	br.waitJS("no capture panel without a capture slot", `document.querySelector('#overview-capture')?.hidden === true`)
	br.screenshot("overview")

	// The failed queue lists the three; retry one with its button.
	br.click(`#nav a[data-page="failed"]`)
	br.waitJS("three failed rows", `document.querySelectorAll('tbody tr[data-id]').length === 3`)
	text = br.text("main")
	require.Contains(t, text, "webhook answered 422: unknown customer")
	br.screenshot("failed-queue")
	br.click(fmt.Sprintf(`button[data-action="retry"][data-id="%d"]`, retried))
	br.waitJS("the retry toast", `document.querySelector('#toast').textContent === 'Retried 1 event'`)
	br.waitJS("the row to leave the queue", fmt.Sprintf(`!document.querySelector('tr[data-id="%d"]') && document.querySelectorAll('tbody tr[data-id]').length === 2`, retried))
	require.Equal(t, outbox.StatusPending, b.event(t, retried).Status)
	require.Contains(t, admin.stderr.String(), "action=retry principal=anonymous remote_addr=127.0.0.1:")

	// A relay publishes the retried event, and more events flow.
	rec := outboxtest.NewRecorder()
	relay, err := outbox.NewRelay(outbox.Postgres(b.pool), outbox.RelayConfig{Schema: b.schema, Sink: rec,
		PollInterval: 50 * time.Millisecond, BatchSize: 10, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, relay.Stop(ctx))
	})
	rec.WaitLen(t, 1, 20*time.Second)
	require.Equal(t, retried, rec.Events()[0].ID, "the retried event is published")
	// Rounds of writes, each followed by one of the dashboard's samples,
	// draw the throughput chart.
	var since int64
	for i := range 8 {
		b.writeN(t, 5+5*(i%4))
		since = waitForSample(t, base, since)
	}

	// The event browser: filter, page back with the keyset pager, then
	// find the retried event by its aggregate and open it.
	br.click(`#nav a[data-page="events"]`)
	br.waitJS("the filter form", `!!document.querySelector('#filters')`)
	br.do("filter by type and status", chromedp.SetValue(chromedp.CSS(`input[name="type"]`), "order.created"),
		chromedp.SetValue(chromedp.CSS(`select[name="status"]`), "processed"),
		chromedp.Click(chromedp.CSS("#search")))
	br.waitJS("a full page of processed order.created events", `location.hash.includes('status=processed') &&
		document.querySelectorAll('tbody tr[data-id]').length === 50 && !!document.querySelector('#page-older') &&
		[...document.querySelectorAll('tbody tr[data-id]')].every(r => r.querySelector('.pill').textContent === 'processed' &&
			r.children[2].textContent === 'order.created')`)
	br.screenshot("event-browser")
	lastOnPage := br.text(`tbody tr[data-id]:last-child td`)
	br.click("#page-older")
	br.waitJS("the older page", fmt.Sprintf(`location.hash.includes('before_id=%s') &&
		Number(document.querySelector('tbody tr[data-id]')?.dataset.id) < %s`, strings.TrimPrefix(lastOnPage, "#"), strings.TrimPrefix(lastOnPage, "#")))
	br.do("search by aggregate", chromedp.Clear(chromedp.CSS(`input[name="type"]`)),
		chromedp.SetValue(chromedp.CSS(`input[name="aggregate_id"]`), "A-121"),
		chromedp.Click(chromedp.CSS("#search")))
	br.waitJS("the retried event, processed", fmt.Sprintf(`location.hash.includes('aggregate_id=A-121') &&
		document.querySelectorAll('tbody tr[data-id]').length === 1 && !!document.querySelector('tr[data-id="%d"]')`, retried))
	br.click(fmt.Sprintf(`tr[data-id="%d"] a`, retried))
	br.waitJS("the detail page", `!!document.querySelector('#payload')`)
	text = br.text("main")
	require.Contains(t, text, fmt.Sprintf("Event #%d", retried))
	require.Contains(t, text, "processed")
	payload, headers := br.text("#payload"), br.text("#headers")
	require.Contains(t, payload, "\"order_id\": 121,\n")
	require.Contains(t, payload, "\"items\": [\n    {\n")
	require.Contains(t, headers, `"tenant": "acme"`)
	require.Contains(t, headers, `"correlation_id": "corr-21"`)
	br.screenshot("event-detail")

	// Change its max attempts, then replay it: the relay publishes it again.
	br.do("set max attempts", chromedp.SendKeys(chromedp.CSS("#max-attempts"), "7\n"))
	br.waitJS("the max attempts toast", `document.querySelector('#toast').textContent === 'Max attempts set to 7'`)
	require.Equal(t, 7, b.event(t, retried).MaxAttempts)
	br.waitJS("the replay button", `!!document.querySelector('#action-replay')`)
	br.click("#action-replay")
	br.waitJS("the replay dialog", `document.querySelector('#dialog').open`)
	br.click("#dialog-ok")
	br.waitJS("the replay toast", fmt.Sprintf(`document.querySelector('#toast').textContent === 'Event %d replayed'`, retried))
	testutil.WaitFor(t, 20*time.Second, "the replayed event to be published again", func() bool {
		n := 0
		for _, e := range rec.Events() {
			if e.ID == retried {
				n++
			}
		}
		return n == 2
	})

	// Discard the stuck event from the retrying tab, with a reason.
	br.do("open the retrying tab", chromedp.Navigate(base+"#/failed?tab=retrying"))
	br.waitJS("the stuck event", fmt.Sprintf(`!!document.querySelector('button[data-action="discard"][data-id="%d"]')`, stuck))
	br.click(fmt.Sprintf(`button[data-action="discard"][data-id="%d"]`, stuck))
	br.waitJS("the reason dialog", `document.querySelector('#dialog').open`)
	br.do("give a reason", chromedp.SendKeys(chromedp.CSS("#dialog-input"), "customer deleted"), chromedp.Click(chromedp.CSS("#dialog-ok")))
	br.waitJS("the discard toast", `document.querySelector('#toast').textContent === 'Discarded 1 event'`)
	e := b.event(t, stuck)
	require.Equal(t, outbox.StatusFailed, e.Status)
	require.Equal(t, "discarded by anonymous: customer deleted", e.LastError)
	// Its detail page says how many of its attempts ended in a lease expiry.
	br.do("open the stuck event", chromedp.Navigate(fmt.Sprintf("%s#/events/%d", base, stuck)))
	br.waitJS("the stuck event's fields", `!!document.querySelector('#fields')`)
	require.Contains(t, br.text("#fields"), "3 of the relay's default (2 ended in a lease expiry: publishing it may crash or stall the relay)")

	// A blocked aggregate (its head dead-lettered, a later event waiting)
	// shows on the Blocked aggregates tab; discarding the head releases it.
	// Both events are due in an hour, so the test's unordered relay leaves
	// them alone.
	blocked := b.write(t,
		outbox.Message{EventType: "invoice.sent", AggregateType: "invoice", AggregateID: "I-7", Payload: 1, Delay: time.Hour},
		outbox.Message{EventType: "invoice.paid", AggregateType: "invoice", AggregateID: "I-7", Payload: 2, Delay: time.Hour})
	b.exec(t, `UPDATE {table} SET status = 'failed', attempts = 5, last_error = 'HTTP 500' WHERE id = $1`, blocked[0])
	br.do("open the blocked tab", chromedp.Navigate(base+"#/failed?tab=blocked"))
	head := fmt.Sprintf(`button[data-action="discard"][data-id="%d"]`, blocked[0])
	br.waitJS("the blocked aggregate", `!!document.querySelector('`+head+`') && !!document.querySelector('button[data-action="retry"][data-id="`+fmt.Sprint(blocked[0])+`"]')`)
	require.Contains(t, br.text("main"), "invoice/I-7")
	br.click(head)
	br.waitJS("the reason dialog", `document.querySelector('#dialog').open`)
	br.do("give a reason", chromedp.SendKeys(chromedp.CSS("#dialog-input"), "duplicate invoice"), chromedp.Click(chromedp.CSS("#dialog-ok")))
	br.waitJS("the discard toast", `document.querySelector('#toast').textContent === 'Discarded 1 event'`)
	br.waitJS("no blocked aggregate", `document.querySelector('main').textContent.includes('No aggregate is blocked.')`)
	require.Equal(t, "discarded by anonymous: duplicate invoice", b.event(t, blocked[0]).LastError)
	b.exec(t, `DELETE FROM {table} WHERE id = ANY($1)`, blocked) // the overview's counts below leave them out

	// Back on the overview the charts show the flow.
	br.do("open the overview", chromedp.Navigate(base+"#/"))
	br.waitJS("published events in the throughput chart", `[...document.querySelectorAll('#chart-throughput polyline')].length >= 2 &&
		document.querySelector('[data-card="processed"] .value') !== null`)
	b.exec(t, `ANALYZE {table}`) // the processed card is the planner's estimate
	br.waitJS("the processed estimate", `document.querySelector('[data-card="processed"] .value').textContent !== '≈0'`)
	br.waitJS("everything published", `document.querySelector('[data-card="pending"] .value').textContent === '0'`)
	br.waitJS("the toast to go", `document.querySelector('#toast').hidden = true`)
	br.screenshot("overview-live")
	require.NotContains(t, br.html(), dbPassword)

	// The relays page lists the running relay from its heartbeat row,
	// whether or not it holds a lease right now.
	br.click(`#nav a[data-page="relays"]`)
	br.waitJS("the relay's row", fmt.Sprintf(`['idle', 'publishing'].includes(document.querySelector('main tr[data-relay=%q]')?.dataset.state)`, relay.ID()))
	require.NotContains(t, br.html(), dbPassword)

	// A phone: the same pages fit a narrow screen without sideways
	// scrolling.
	br.do("become a phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
	br.do("open the overview on a phone", chromedp.Navigate(base+"#/"), chromedp.Reload())
	br.waitJS("the cards", `!!document.querySelector('[data-card="pending"]')`)
	br.waitJS("no sideways scrolling", `document.documentElement.scrollWidth <= window.innerWidth`)
	br.screenshot("overview-phone")
	br.do("open the failed queue on a phone", chromedp.Navigate(base+"#/failed"))
	br.waitJS("the failed rows as cards", `document.querySelectorAll('tbody tr[data-id]').length === 3 &&
		getComputedStyle(document.querySelector('thead')).display === 'none'`)
	br.waitJS("no sideways scrolling", `document.documentElement.scrollWidth <= window.innerWidth`)
	br.screenshot("failed-queue-phone")
	br.do("open an event on a phone", chromedp.Navigate(fmt.Sprintf("%s#/events/%d", base, ids[0])))
	br.waitJS("the payload", `!!document.querySelector('#payload')`)
	br.waitJS("no sideways scrolling", `document.documentElement.scrollWidth <= window.innerWidth`)
	br.screenshot("event-detail-phone")

	require.Equal(t, 0, admin.stop(t, os.Interrupt))
	require.NotContains(t, admin.stderr.String(), dbPassword)
	require.False(t, strings.Contains(admin.stderr.String(), "level=ERROR"), admin.stderr.String())

	// Behind a token, the dashboard asks for it, refuses a wrong one and
	// keeps the right one for the tab.
	_, base = startAdmin(t, dbURL, b.schema, []string{"OUTBOX_ADMIN_TOKEN=" + adminTestToken}, "--addr", "127.0.0.1:0")
	br.do("become a laptop again", chromedp.EmulateReset(), chromedp.Navigate(base))
	br.waitJS("the sign-in form", `!!document.querySelector('#token')`)
	br.do("sign in with a wrong token", chromedp.SendKeys(chromedp.CSS("#token"), "wrong-token-0123456789\n"))
	br.waitJS("the refusal", `!!document.querySelector('#token') && document.querySelector('main').textContent.includes('That token was not accepted.')`)
	br.do("sign in", chromedp.SendKeys(chromedp.CSS("#token"), adminTestToken+"\n"))
	br.waitJS("the overview", `document.querySelector('[data-card^="failed"] .value')?.textContent === '3' &&
		document.querySelector('#who').textContent.includes('token')`)
	br.do("reload", chromedp.Reload())
	br.waitJS("the overview without signing in again", `!!document.querySelector('[data-card="pending"]')`)
	require.NotContains(t, br.html(), adminTestToken)
}

// With the inbox in the schema, the overview shows each consumer's lag:
// the unprocessed messages and the oldest one's age.
func TestAdminDashboardConsumersInBrowser(t *testing.T) {
	t.Parallel()
	br := newBrowser(t)
	b := setup(t)
	requireOK(t, outboxCmd(t, b.schema, "migrate", "--inbox"))
	b.exec(t, `INSERT INTO `+pgx.Identifier{b.schema, "inbox_messages"}.Sanitize()+` (consumer, message_id, payload, received_at) VALUES
  ('billing', '1', '{}', now() - interval '90 seconds'), ('billing', '2', '{}', now())`)
	dbURL, _ := databaseURLWithPassword(t)
	_, base := startAdmin(t, dbURL, b.schema, nil, "--addr", "127.0.0.1:0", "--sample-interval", "500ms")

	br.do("open the overview", chromedp.Navigate(base))
	br.waitJS("the consumers panel", `document.querySelector('#overview-consumers')?.hidden === false &&
		[...document.querySelectorAll('#overview-consumers tr[data-consumer]')].map(r => r.dataset.consumer).join() === 'billing'`)
	text := br.text("#overview-consumers")
	require.Contains(t, text, "Consumers (inbox)")
	require.Regexp(t, `billing\s+2\s+1m 3\ds`, text)
	br.screenshot("overview-consumers")
}
