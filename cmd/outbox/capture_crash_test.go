package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/pgcluster"
	"github.com/outboxkit/outbox/outboxadmin"
	"github.com/outboxkit/outbox/outboxcdc"
)

// logicalSettings make a private cluster that capture relays can stream
// from.
var logicalSettings = map[string]string{
	"wal_level": "logical", "max_replication_slots": "20", "max_wal_senders": "20", "max_connections": "150",
	"wal_sender_timeout": "10s",
}

// captureServer is a webhook endpoint that records each event it
// acknowledged, and holds requests (without acknowledging them) while
// held; fail, when set, answers an event with the returned status instead.
type captureServer struct {
	*httptest.Server
	mu      sync.Mutex
	held    bool
	release chan struct{}
	acked   map[int64]int
	order   []int64 // acknowledgements in arrival order
	arrived int
	fail    func(id int64, attempt int) int
	tries   map[int64]int
	waiting map[int]bool // arrival numbers of the requests held now
}

func newCaptureServer(t *testing.T) *captureServer {
	t.Helper()
	s := &captureServer{acked: map[int64]int{}, tries: map[int64]int{}, waiting: map[int]bool{}, release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id, err := strconv.ParseInt(r.Header.Get("ce-id"), 10, 64)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.arrived++
		s.tries[id]++
		held, release, fail, try, seq := s.held, s.release, s.fail, s.tries[id], s.arrived
		if held {
			s.waiting[seq] = true
		}
		s.mu.Unlock()
		if held {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			s.mu.Lock()
			delete(s.waiting, seq)
			s.mu.Unlock()
			if r.Context().Err() != nil {
				return // the sender is gone: nothing was acknowledged
			}
		}
		if fail != nil {
			if code := fail(id, try); code != 0 {
				w.WriteHeader(code)
				return
			}
		}
		s.mu.Lock()
		s.acked[id]++
		s.order = append(s.order, id)
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *captureServer) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = true
	s.release = make(chan struct{})
}

func (s *captureServer) letThrough() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		s.held = false
		close(s.release)
	}
}

// heldUpTo is how many requests among the first n arrivals are still held.
func (s *captureServer) heldUpTo(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := 0
	for seq := range s.waiting {
		if seq <= n {
			c++
		}
	}
	return c
}

func (s *captureServer) arrivals() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.arrived
}

func (s *captureServer) ackedIDs() map[int64]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int64]int, len(s.acked))
	for k, v := range s.acked {
		out[k] = v
	}
	return out
}

// captureDB is a migrated schema on a logical cluster.
type captureDB struct {
	url, schema string
	pool        *pgxpool.Pool
}

func newCaptureDB(t *testing.T, c *pgcluster.Cluster) captureDB {
	t.Helper()
	db := captureDB{url: c.URL(), schema: testutil.SchemaName(t)}
	pool, err := pgxpool.New(context.Background(), db.url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	db.pool = pool
	res := run(t, nil, "--database-url", db.url, "--schema", db.schema, "migrate", "--logical")
	requireOK(t, res)
	require.Contains(t, res.stdout, "created publication and logical replication slot")
	require.Contains(t, res.stdout, "no failover slots", "PostgreSQL 15 here: migrate says what a failover does")
	t.Cleanup(func() {
		run(t, nil, "--database-url", db.url, "--schema", db.schema, "migrate", "--drop-logical")
	})
	return db
}

func (db captureDB) relayArgs(sinkURL, id string, extra ...string) []string {
	return append([]string{"--database-url", db.url, "--schema", db.schema, "relay", "--capture", "logical",
		"--sink", sinkURL, "--relay-id", id, "--sink-concurrency", "1", "--poll-interval", "100ms",
		"--backoff-base", "20ms", "--backoff-max", "100ms", "--log-level", "warn"}, extra...)
}

// insert commits n events, one transaction each, and returns their IDs.
func (db captureDB) insert(t *testing.T, n int, typ string) []int64 {
	t.Helper()
	ids := make([]int64, n)
	for i := range ids {
		require.NoError(t, db.pool.QueryRow(context.Background(), `INSERT INTO `+testutil.Table(db.schema)+
			` (event_type, payload) VALUES ($1, '{}') RETURNING id`, typ).Scan(&ids[i]))
	}
	return ids
}

func (db captureDB) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	require.NoError(t, db.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+testutil.Table(db.schema)+` WHERE `+where).Scan(&n))
	return n
}

// waitRelays waits until n relays have started (their heartbeat rows).
func (db captureDB) waitRelays(t *testing.T, n int) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, "the relays started", func() bool {
		var got int
		require.NoError(t, db.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{db.schema, "outbox_relays"}.Sanitize()).Scan(&got))
		return got == n
	})
}

// holder is the relay the capture lease row names, "" for none.
func (db captureDB) holder(t *testing.T) string {
	t.Helper()
	var h string
	err := db.pool.QueryRow(context.Background(), `SELECT holder FROM `+pgx.Identifier{db.schema, "outbox_leases"}.Sanitize()+
		` WHERE name LIKE 'capture:%' AND expires_at > now()`).Scan(&h)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	require.NoError(t, err)
	return h
}

// TestCaptureRelayBinary runs the capture relay's crash and fault tests on
// one private cluster with wal_level = logical, a schema (and a slot)
// each; the database crash test has a cluster of its own.
func TestCaptureRelayBinary(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{Settings: logicalSettings})
	t.Run("SIGKILLStreamingRelayStandbyTakesOver", func(t *testing.T) {
		t.Parallel()
		testCaptureSIGKILL(t, c)
	})
	t.Run("FailingSinkRetriesThroughTable", func(t *testing.T) {
		t.Parallel()
		testCaptureFailingSink(t, c)
	})
	t.Run("SlotLeftBehindIsReported", func(t *testing.T) {
		t.Parallel()
		testCaptureSlotLeftBehind(t, c)
	})
	t.Run("PollRelayBesideCaptureIsWarned", func(t *testing.T) {
		t.Parallel()
		testPollBesideCapture(t, c)
	})
	t.Run("EventTypesSplitWithPollRelay", func(t *testing.T) {
		t.Parallel()
		testCaptureEventTypes(t, c)
	})
	t.Run("StatsAndAdminShowTheSlot", func(t *testing.T) {
		t.Parallel()
		testCaptureStats(t, c)
	})
}

func testCaptureSIGKILL(t *testing.T, c *pgcluster.Cluster) {
	db := newCaptureDB(t, c)
	srv := newCaptureServer(t)
	a := start(t, nil, db.relayArgs(srv.URL, "a")...)
	testutil.WaitFor(t, 20*time.Second, "relay a streams", func() bool {
		require.False(t, a.exited(), "relay a exited; stderr:\n%s", a.stderr.String())
		return db.holder(t) == "a"
	})
	b := start(t, nil, db.relayArgs(srv.URL, "b")...)

	first := db.insert(t, 50, "first")
	testutil.WaitFor(t, 20*time.Second, "the first events processed", func() bool {
		return db.count(t, `status = 'processed'`) == 50
	})
	// Their position is confirmed soon after they were marked.
	var lsn string
	require.NoError(t, db.pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn))
	testutil.WaitFor(t, 10*time.Second, "the slot's position confirmed", func() bool {
		var ok bool
		require.NoError(t, db.pool.QueryRow(context.Background(), `SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2`,
			lsn, outboxcdc.SlotName(db.schema, "")).Scan(&ok))
		return ok
	})
	// The sink holds the next events unacknowledged; the streaming relay
	// dies with them in flight.
	srv.hold()
	before := srv.arrivals()
	second := db.insert(t, 50, "second")
	testutil.WaitFor(t, 20*time.Second, "a publish in flight", func() bool { return srv.arrivals() > before })
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	<-a.done
	// The requests a left held end when the server sees their connection
	// closed; released before that, they would count as acknowledged.
	killed := srv.arrivals()
	testutil.WaitFor(t, 10*time.Second, "the dead relay's requests ended", func() bool { return srv.heldUpTo(killed) == 0 })
	srv.letThrough()
	testutil.WaitFor(t, 30*time.Second, "the standby takes over and delivers the rest", func() bool {
		require.False(t, b.exited(), "relay b exited; stderr:\n%s", b.stderr.String())
		return db.count(t, `status = 'processed'`) == 100
	})
	require.Equal(t, "b", db.holder(t))
	acked := srv.ackedIDs()
	ids := slices.Concat(first, second)
	dups := 0
	for _, id := range ids {
		require.GreaterOrEqual(t, acked[id], 1, "event %d was never delivered", id)
		dups += acked[id] - 1
	}
	require.Len(t, acked, len(ids), "no ghost events")
	// Only the events published but not confirmed when a died can come
	// twice: none here, since the sink acknowledged none of the second
	// run and the first was confirmed.
	require.Zero(t, dups, "duplicates beyond the unconfirmed window")
	require.Zero(t, db.count(t, `attempts > 0`), "nothing went through the table path")
	require.Equal(t, 0, b.stop(t, syscall.SIGTERM))
}

func testCaptureFailingSink(t *testing.T, c *pgcluster.Cluster) {
	db := newCaptureDB(t, c)
	srv := newCaptureServer(t)
	var poison sync.Map
	srv.fail = func(id int64, try int) int {
		if _, ok := poison.Load(id); ok {
			return http.StatusInternalServerError // retried until out of attempts
		}
		if id%3 == 0 && try <= 2 {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	relay := start(t, nil, db.relayArgs(srv.URL, "r", "--max-attempts", "3")...)
	for _, id := range db.insert(t, 5, "poison") {
		poison.Store(id, true)
	}
	ok := db.insert(t, 40, "ok")
	testutil.WaitFor(t, 30*time.Second, "every event settled", func() bool {
		require.False(t, relay.exited(), "relay exited; stderr:\n%s", relay.stderr.String())
		return db.count(t, `status = 'processed'`) == 40 && db.count(t, `status = 'failed'`) == 5
	})
	acked := srv.ackedIDs()
	for _, id := range ok {
		require.GreaterOrEqual(t, acked[id], 1, "event %d was never delivered", id)
	}
	require.Equal(t, 5, db.count(t, `status = 'failed' AND event_type = 'poison' AND attempts = 3`), "poison dead-lettered after 3 attempts")
	require.Positive(t, db.count(t, `status = 'processed' AND attempts = 2`), "events retried through the table path")
	require.Equal(t, 0, relay.stop(t, syscall.SIGTERM))
}

func testCaptureSlotLeftBehind(t *testing.T, c *pgcluster.Cluster) {
	db := newCaptureDB(t, c)
	db.insert(t, 3, "x")
	// A poll relay on a table whose capture slot nobody streams from.
	srv := newCaptureServer(t)
	p := start(t, nil, "--database-url", db.url, "--schema", db.schema, "relay", "--sink", srv.URL, "--log-level", "warn", "--log-format", "json")
	testutil.WaitFor(t, 20*time.Second, "the slot reported", func() bool {
		return strings.Contains(p.stderr.String(), "left behind")
	})
	var line map[string]any
	for _, l := range strings.Split(p.stderr.String(), "\n") {
		if strings.Contains(l, "left behind") {
			require.NoError(t, json.Unmarshal([]byte(l), &line))
		}
	}
	require.Equal(t, outboxcdc.SlotName(db.schema, ""), line["slot"])
	require.Positive(t, line["retained_bytes"])
	db.waitRelays(t, 1)
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), p.stderr.String())
	res := run(t, nil, "--database-url", db.url, "--schema", db.schema, "migrate", "--drop-logical")
	requireOK(t, res)
	require.Contains(t, res.stdout, "dropped logical replication slot and publication")
}

func testPollBesideCapture(t *testing.T, c *pgcluster.Cluster) {
	db := newCaptureDB(t, c)
	srv := newCaptureServer(t)
	capture := start(t, nil, db.relayArgs(srv.URL, "capture")...)
	testutil.WaitFor(t, 20*time.Second, "the capture relay streams", func() bool {
		require.False(t, capture.exited(), "capture relay exited; stderr:\n%s", capture.stderr.String())
		return db.holder(t) == "capture"
	})
	poll := start(t, nil, "--database-url", db.url, "--schema", db.schema, "relay", "--sink", srv.URL, "--relay-id", "poll", "--log-level", "warn")
	testutil.WaitFor(t, 20*time.Second, "the poll relay warned", func() bool {
		return strings.Contains(poll.stderr.String(), "a relay --capture logical streams from this table")
	})
	require.NotContains(t, poll.stderr.String(), "left behind")
	db.waitRelays(t, 2)
	require.Equal(t, 0, poll.stop(t, syscall.SIGTERM), poll.stderr.String())
	require.Equal(t, 0, capture.stop(t, syscall.SIGTERM), capture.stderr.String())
}

func TestCaptureRelaySurvivesDatabaseCrash(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{Settings: logicalSettings})
	db := newCaptureDB(t, c)
	srv := newCaptureServer(t)
	relay := start(t, nil, db.relayArgs(srv.URL, "r")...)
	ids := db.insert(t, 30, "before")
	// Crash the server while the relay streams; the events committed
	// before it are on disk, and the slot replays what was not confirmed.
	testutil.WaitFor(t, 20*time.Second, "some events delivered", func() bool { return len(srv.ackedIDs()) > 0 })
	db.waitRelays(t, 1)
	c.Crash(t)
	c.Start(t)
	db.pool.Reset() // its connections died with the server
	ids = append(ids, db.insert(t, 30, "after")...)
	testutil.WaitFor(t, 60*time.Second, "every event processed", func() bool {
		require.False(t, relay.exited(), "relay exited; stderr:\n%s", relay.stderr.String())
		return db.count(t, `status = 'processed'`) == 60
	})
	acked := srv.ackedIDs()
	for _, id := range ids {
		require.GreaterOrEqual(t, acked[id], 1, "event %d was never delivered", id)
	}
	require.Len(t, acked, len(ids), "no ghost events")
	require.Equal(t, 0, relay.stop(t, syscall.SIGTERM))
}

func TestCaptureRelayUsage(t *testing.T) {
	t.Parallel()
	schema := testutil.EmptySchemaName(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--capture", "wal"}, `invalid --capture "wal": use poll or logical`},
		{[]string{"--capture", "logical", "--max-batch-bytes", "1000"}, "--max-batch-bytes cannot be used with --capture logical"},
		{[]string{"--capture", "logical", "--ordering", "aggregate"}, "--ordering aggregate cannot be used with --capture logical"},
		{[]string{"--max-slot-lag", "100"}, "--max-slot-lag needs --capture logical"},
	} {
		res := outboxCmd(t, schema, append([]string{"relay", "--sink", "stdout:"}, tc.args...)...)
		requireFail(t, res, 2, tc.want)
	}
	// The shared server runs with wal_level = replica.
	b := setup(t)
	res := outboxCmd(t, b.schema, "relay", "--sink", "stdout:", "--capture", "logical")
	requireFail(t, res, 2, "wal_level is not logical", "ALTER SYSTEM SET wal_level = logical")
}

// captureStats runs stats --json and returns its capture document.
func (db captureDB) captureStats(t *testing.T) outboxadmin.CaptureJSON {
	t.Helper()
	res := run(t, nil, "--database-url", db.url, "--schema", db.schema, "stats", "--json")
	requireOK(t, res)
	var doc struct {
		Capture *outboxadmin.CaptureJSON `json:"capture"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
	require.NotNil(t, doc.Capture, "stats --json on PostgreSQL has capture:\n%s", res.stdout)
	return *doc.Capture
}

// stats, the admin API and the dashboard show the capture slot: after
// migrate --logical, inactive, its retained WAL growing while no relay
// streams; active, with the walsender's pid and the lease row's holder,
// while a capture relay streams.
func testCaptureStats(t *testing.T, c *pgcluster.Cluster) {
	db := newCaptureDB(t, c)
	slot := outboxcdc.SlotName(db.schema, "")
	first := db.captureStats(t)
	require.True(t, first.Available)
	require.Empty(t, first.Denied)
	require.Len(t, first.Slots, 1)
	s := first.Slots[0]
	require.Equal(t, slot, s.Slot)
	require.True(t, s.Exists)
	require.False(t, s.Active)
	require.Nil(t, s.ActivePID)
	require.Empty(t, s.Holder)
	require.NotNil(t, s.RetainedBytes)
	require.NotEmpty(t, s.ConfirmedFlushLSN)
	require.NotNil(t, s.WALStatus, "PostgreSQL 13 and later report wal_status")

	// No relay streams: the slot keeps every byte written since.
	db.insert(t, 200, "x")
	later := db.captureStats(t).Slots[0]
	require.Greater(t, *later.RetainedBytes, *s.RetainedBytes, "retained WAL grows while no relay streams")
	require.Equal(t, s.ConfirmedFlushLSN, later.ConfirmedFlushLSN)
	res := run(t, nil, "--database-url", db.url, "--schema", db.schema, "stats")
	requireOK(t, res)
	require.Contains(t, res.stdout, "capture slots (relay --capture logical): 1")
	require.Regexp(t, slot+`\s+inactive: no relay streams from it, retains \d+(\.\d)? [KM]iB of WAL`, res.stdout)

	srv := newCaptureServer(t)
	relay := start(t, nil, db.relayArgs(srv.URL, "streamer")...)
	var active outboxadmin.CaptureSlotJSON
	testutil.WaitFor(t, 30*time.Second, "stats shows the slot active", func() bool {
		require.False(t, relay.exited(), "relay exited; stderr:\n%s", relay.stderr.String())
		active = db.captureStats(t).Slots[0]
		return active.Active && active.Holder == "streamer" && db.count(t, `status = 'processed'`) == 200
	})
	require.NotNil(t, active.ActivePID)
	require.Positive(t, *active.ActivePID)
	require.False(t, active.HolderExpired)
	require.NotNil(t, active.HolderUntil)
	res = run(t, nil, "--database-url", db.url, "--schema", db.schema, "stats")
	requireOK(t, res)
	require.Regexp(t, slot+fmt.Sprintf(`\s+active \(pid %d\), .*held by streamer`, *active.ActivePID), res.stdout)

	// The admin API answers the same document.
	_, base := startAdmin(t, db.url, db.schema, nil, "--addr", "127.0.0.1:0")
	code, body := adminGet(t, base+"api/capture")
	require.Equal(t, http.StatusOK, code, body)
	var api outboxadmin.CaptureJSON
	require.NoError(t, json.Unmarshal([]byte(body), &api))
	require.True(t, api.Available)
	require.Len(t, api.Slots, 1)
	require.True(t, api.Slots[0].Active)
	require.Equal(t, "streamer", api.Slots[0].Holder)

	// The dashboard's overview lists it.
	br := newBrowser(t)
	br.do("open the overview", chromedp.Navigate(base))
	br.waitJS("the capture panel", `document.querySelector('#overview-capture')?.hidden === false &&
		[...document.querySelectorAll('#overview-capture tr[data-slot]')].map(r => r.dataset.slot + ':' + r.dataset.state).join() === '`+slot+`:active'`)
	text := br.text("#overview-capture")
	require.Contains(t, text, "Capture slots")
	require.Contains(t, text, "streamer")
	br.screenshot("overview-capture")
	require.Equal(t, 0, relay.stop(t, syscall.SIGTERM), relay.stderr.String())
}

// A capture relay with --event-types streams only its types; a poll relay
// with other --event-types on the same table delivers the rest, each
// event once, and is reminded (not warned) that a capture relay streams.
func testCaptureEventTypes(t *testing.T, c *pgcluster.Cluster) {
	db := newCaptureDB(t, c)
	streamSrv, pollSrv := newCaptureServer(t), newCaptureServer(t)
	capture := start(t, nil, db.relayArgs(streamSrv.URL, "capture", "--event-types", "a.*")...)
	testutil.WaitFor(t, 20*time.Second, "the capture relay streams", func() bool {
		require.False(t, capture.exited(), "capture relay exited; stderr:\n%s", capture.stderr.String())
		return db.holder(t) == "capture"
	})
	a := db.insert(t, 20, "a.x")
	b := db.insert(t, 20, "b.x")
	testutil.WaitFor(t, 20*time.Second, "the a events processed", func() bool {
		return db.count(t, `status = 'processed' AND event_type = 'a.x'`) == 20
	})
	require.Equal(t, 20, db.count(t, `status = 'pending' AND event_type = 'b.x' AND attempts = 0`), "b events left pending")
	poll := start(t, nil, "--database-url", db.url, "--schema", db.schema, "relay", "--sink", pollSrv.URL, "--relay-id", "poll",
		"--event-types", "b.*", "--poll-interval", "100ms", "--log-level", "info")
	testutil.WaitFor(t, 20*time.Second, "the b events processed", func() bool {
		require.False(t, poll.exited(), "poll relay exited; stderr:\n%s", poll.stderr.String())
		return db.count(t, `status = 'processed'`) == 40
	})
	for srv, ids := range map[*captureServer][]int64{streamSrv: a, pollSrv: b} {
		acked := srv.ackedIDs()
		require.Len(t, acked, len(ids), "each relay delivers its own types only")
		for _, id := range ids {
			require.Equal(t, 1, acked[id], "event %d", id)
		}
	}
	require.Contains(t, poll.stderr.String(), "make sure it serves other --event-types than this relay")
	require.NotContains(t, poll.stderr.String(), "level=WARN")
	require.Equal(t, 0, poll.stop(t, syscall.SIGTERM), poll.stderr.String())
	require.Equal(t, 0, capture.stop(t, syscall.SIGTERM), capture.stderr.String())
}
