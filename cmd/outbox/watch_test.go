package main_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
)

// terminal is the binary running with its stdout and stderr on a pseudo
// terminal, as an operator's shell runs it.
type terminal struct {
	cmd    *exec.Cmd
	out    *syncBuffer   // everything written to the terminal
	copied chan struct{} // closed when out has it all
	done   chan struct{}
	err    error
}

// startOnTerminal starts the binary with args on a new 120x40 terminal.
func startOnTerminal(t *testing.T, args ...string) *terminal {
	t.Helper()
	term := &terminal{cmd: exec.Command(binary, args...), out: &syncBuffer{}, done: make(chan struct{}), copied: make(chan struct{})}
	term.cmd.Env = environ()
	ptmx, err := pty.StartWithSize(term.cmd, &pty.Winsize{Rows: 40, Cols: 120})
	require.NoError(t, err)
	go func() {
		defer close(term.copied)
		// Ends with EIO once the process exits and the terminal closes.
		_, _ = io.Copy(term.out, ptmx)
	}()
	go func() {
		term.err = term.cmd.Wait()
		close(term.done)
	}()
	t.Cleanup(func() {
		select {
		case <-term.done:
		default:
			_ = term.cmd.Process.Kill()
			<-term.done
		}
		_ = ptmx.Close()
		<-term.copied
	})
	return term
}

// wait waits for the process to exit and for its output, and returns its
// exit code.
func (term *terminal) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-term.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("outbox did not exit within 30s; terminal:\n%q", term.out.String())
	}
	select {
	case <-term.copied:
	case <-time.After(10 * time.Second):
		t.Fatalf("the terminal did not close within 10s of the exit; terminal:\n%q", term.out.String())
	}
	var exitErr *exec.ExitError
	if errors.As(term.err, &exitErr) {
		return exitErr.ExitCode()
	}
	require.NoError(t, term.err)
	return 0
}

func (term *terminal) stop(t *testing.T, sig os.Signal) int {
	t.Helper()
	require.NoError(t, term.cmd.Process.Signal(sig))
	return term.wait(t)
}

func TestStatsWatchRedrawsOnATerminal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.writeN(t, 1)
	term := startOnTerminal(t, "--database-url", testutil.DatabaseURL(), "--schema", b.schema, "stats", "--watch", "--interval", "200ms")
	redraw := regexp.MustCompile("\x1b\\[\\d+A\r\x1b\\[J")
	testutil.WaitFor(t, 20*time.Second, "a redraw", func() bool { return redraw.MatchString(term.out.String()) })
	b.writeN(t, 2)
	testutil.WaitFor(t, 20*time.Second, "a redraw showing 3 pending", func() bool {
		draws := redraw.Split(term.out.String(), -1)
		return regexp.MustCompile(`(?m)^pending +3\r?$`).MatchString(draws[len(draws)-1])
	})
	out := term.out.String()
	require.Contains(t, out, "outbox stats, every 200ms, at ")
	require.Regexp(t, `(?m)^written +\d+\.\d/s\r?$`, out)
	require.Regexp(t, `(?m)^outbox_events +\d+ live rows, \d+ dead tuples`, out, "the tables' health refreshes too")
	require.Regexp(t, `(?m)^vacuum horizon +`, out)
	require.Equal(t, 0, term.stop(t, syscall.SIGINT), out)
}

func TestStatsWatchPrintsBlocksToAPipe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", b.schema, "stats", "--watch", "--interval", "150ms")
	testutil.WaitFor(t, 20*time.Second, "two blocks", func() bool { return strings.Count(p.stdout.String(), "\n# ") >= 1 })
	b.writeN(t, 2)
	testutil.WaitFor(t, 20*time.Second, "a block with 2 pending", func() bool {
		return regexp.MustCompile(`(?m)^pending +2$`).MatchString(p.stdout.String())
	})
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM))
	out := p.stdout.String()
	require.NotContains(t, out, "\x1b")
	for _, block := range strings.Split(strings.TrimSuffix(out, "\n\n"), "\n\n") {
		require.Regexp(t, `^# \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\npending +\d+\nprocessing +0\nprocessed +0\nfailed +0\noldest pending age +\S+\nwritten +\S+\npublished +\S+\noutbox_events +\d+ live rows`, block)
		require.Regexp(t, `\nvacuum horizon +.+$`, block)
	}
	require.Empty(t, p.stderr.String())
}

func TestStatsWatchJSONLines(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", b.schema, "stats", "--watch", "--json", "--interval", "100ms")
	testutil.WaitFor(t, 20*time.Second, "three lines", func() bool { return strings.Count(p.stdout.String(), "\n") >= 3 })
	require.Equal(t, 0, p.stop(t, syscall.SIGINT))
	lines := strings.Split(strings.TrimSuffix(p.stdout.String(), "\n"), "\n")
	for i, l := range lines {
		var doc map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &doc), l)
		for _, k := range []string{"at", "pending", "processing", "processed", "failed", "oldest_pending_age_seconds", "written_per_second", "published_per_second",
			"tables", "vacuum_horizon"} {
			require.Contains(t, doc, k)
		}
		if i > 0 {
			require.NotNil(t, doc["published_per_second"], "rates after the first line")
		}
	}
}

func TestStatsWatchUsage(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", testutil.DatabaseURL()}
	requireFail(t, run(t, nil, append(db, "stats", "--interval", "5s")...), 2, "--interval needs --watch")
	requireFail(t, run(t, nil, append(db, "stats", "--watch", "--interval", "10ms")...), 2, "invalid --interval 10ms: use at least 100ms")
}

// seedProcessed writes n processed events: every third of type
// invoice.sent, the others order.created.
func seedProcessed(t *testing.T, b eventsBundle, n int) []int64 {
	t.Helper()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: fmt.Sprint(i), Payload: i}
		if i%3 == 0 {
			msgs[i].EventType, msgs[i].AggregateType = "invoice.sent", "invoice"
		}
	}
	ids := b.write(t, msgs...)
	b.exec(t, `UPDATE {table} SET status = 'processed', processed_at = now()`)
	return ids
}

func TestEventsReplayWithFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seedProcessed(t, b, 9)
	b.exec(t, `UPDATE {table} SET created_at = now() - interval '2 days' WHERE id = $1`, ids[1])

	res := outboxCmd(t, b.schema, "events", "replay", "--status", "processed", "--type", "invoice.sent")
	requireOK(t, res) // no progress off a terminal
	require.Equal(t, "replayed 3 processed events\n", res.stdout)
	for i, id := range ids {
		want := outbox.StatusProcessed
		if i%3 == 0 {
			want = outbox.StatusPending
		}
		require.Equal(t, want, b.event(t, id).Status, "event %d", i)
	}

	dayAgo := time.Now().Add(-24 * time.Hour).UTC().Format(time.RFC3339)
	res = outboxCmd(t, b.schema, "events", "replay", "--status", "processed", "--aggregate-type", "order", "--created-before", dayAgo)
	requireOK(t, res)
	require.Equal(t, "replayed 1 processed events\n", res.stdout)
	require.Equal(t, outbox.StatusPending, b.event(t, ids[1]).Status)

	res = outboxCmd(t, b.schema, "events", "replay", "--status", "processed", "--aggregate-id", "5", "--created-after", dayAgo)
	requireOK(t, res)
	require.Equal(t, "replayed 1 processed events\n", res.stdout)

	// Everything left: the whole history needs --yes; --dry-run counts it.
	requireFail(t, outboxCmd(t, b.schema, "events", "replay", "--status", "processed"), 2,
		"replaying every processed event re-sends the whole history: narrow it with --type")
	res = outboxCmd(t, b.schema, "events", "replay", "--status", "processed", "--dry-run")
	requireOK(t, res)
	require.Equal(t, "would replay 4 processed events (dry run: nothing changed)\n", res.stdout)
	require.Equal(t, int64(5), b.stats(t).Pending, "a dry run changes nothing")
	res = outboxCmd(t, b.schema, "events", "replay", "--status", "processed", "--yes")
	requireOK(t, res)
	require.Equal(t, "replayed 4 processed events\n", res.stdout)
	require.Equal(t, int64(9), b.stats(t).Pending)
}

func TestEventsReplayUsage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"events", "replay"}, "pass event IDs or --status processed (with filters such as --type)"},
		{[]string{"events", "replay", "--type", "x"}, "missing --status processed: the filters select processed events to replay"},
		{[]string{"events", "replay", "1", "--status", "processed"}, "pass event IDs or --status processed with filters, not both"},
		{[]string{"events", "replay", "--status", "failed"}, `invalid --status "failed": replay takes processed events only`},
		{[]string{"events", "replay", "--status", "done"}, `invalid --status: unknown status "done"`},
		{[]string{"events", "replay", "--status", "processed", "--created-after", "yesterday"}, `invalid --created-after "yesterday": use an RFC 3339 time`},
		{[]string{"events", "replay", "--status", "processed", "--created-after", "2025-02-01T00:00:00Z", "--created-before", "2025-01-01T00:00:00Z"},
			"invalid --created-before: must be later than --created-after"},
		{[]string{"events", "replay", "1", "--dry-run"}, "--dry-run and --yes go with --status processed"},
	}
	for _, tt := range tests {
		requireFail(t, outboxCmd(t, b.schema, tt.args...), 2, tt.want)
	}
}

// Replaying many events shows a progress line with an ETA on a terminal.
func TestEventsReplayProgressOnATerminal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	n := 2*outbox.RequeueBatchSizeDefault + 500
	seedProcessed(t, b, n)
	term := startOnTerminal(t, "--database-url", testutil.DatabaseURL(), "--schema", b.schema, "events", "replay", "--status", "processed", "--yes")
	require.Equal(t, 0, term.wait(t), term.out.String())
	out := term.out.String()
	require.Regexp(t, fmt.Sprintf(`\r\x1b\[Kreplayed 1000 of %d events \(\d+/s, ETA \d+s\)`, n), out)
	require.Contains(t, out, fmt.Sprintf("replayed %d processed events", n))
	require.Equal(t, int64(n), b.stats(t).Pending)

	// Many IDs are replayed in batches with progress too.
	b.exec(t, `UPDATE {table} SET status = 'processed', processed_at = now()`)
	var ids []string
	for id := 1; id <= 1500; id++ {
		ids = append(ids, fmt.Sprint(id))
	}
	term = startOnTerminal(t, append([]string{"--database-url", testutil.DatabaseURL(), "--schema", b.schema, "events", "replay"}, ids...)...)
	require.Equal(t, 0, term.wait(t), term.out.String())
	require.Regexp(t, `\r\x1b\[Kreplayed 1000 of 1500 events \(\d+/s, ETA \d+s\)`, term.out.String())
	require.Contains(t, term.out.String(), "event 1500: replayed (processed -> pending)")
}
