package main_test

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/pgcluster"
)

// checkReport is the part of outbox check --json the tests read.
type checkReport struct {
	Passed       bool   `json:"passed"`
	Interrupted  bool   `json:"interrupted"`
	Scratch      string `json:"scratch"`
	Kept         bool   `json:"scratch_kept"`
	VerifiedBy   string `json:"verified_by"`
	Written      int    `json:"written"`
	Kills        int    `json:"kills"`
	Restarts     int    `json:"relay_restarts"`
	Resets       int    `json:"connection_resets"`
	Refusals     int    `json:"connection_refusals"`
	Blackholes   int    `json:"blackholes"`
	ProxySkipped string `json:"proxy_skipped"`
	Delivered    int    `json:"delivered"`
	Deliveries   *int   `json:"deliveries"`
	Lost         int    `json:"lost"`
	LostIDs      []int  `json:"lost_ids"`
	Ghosts       int    `json:"ghosts"`
	GhostIDs     []int  `json:"ghost_ids"`
	Duplicated   *int   `json:"duplicated"`
	OutOfOrder   *int   `json:"out_of_order"`
	DeadLettered int    `json:"dead_lettered"`
	Undelivered  int    `json:"undelivered"`
}

// checkArgs is a short check: a few seconds of writes, kills and cuts.
func checkArgs(db []string, extra ...string) []string {
	args := append(append([]string{}, db...), "check", "--json", "--log-level", "warn",
		"--events", "300", "--aggregates", "5", "--duration", "3s", "--kills", "3", "--cuts", "3", "--drain-timeout", "45s")
	return append(args, extra...)
}

func parseCheckReport(t *testing.T, res result) checkReport {
	t.Helper()
	var rep checkReport
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &rep), "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	return rep
}

// requireSaneCheck checks a passing run's report of checkArgs.
func requireSaneCheck(t *testing.T, res result) checkReport {
	t.Helper()
	require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	rep := parseCheckReport(t, res)
	require.True(t, rep.Passed)
	require.False(t, rep.Interrupted)
	require.Equal(t, "receiver", rep.VerifiedBy)
	require.Equal(t, 300, rep.Written)
	require.Equal(t, 300, rep.Delivered, "every event delivered")
	require.Zero(t, rep.Lost)
	require.Zero(t, rep.Ghosts)
	require.Zero(t, rep.Undelivered)
	require.NotNil(t, rep.Deliveries)
	require.NotNil(t, rep.Duplicated)
	require.Equal(t, rep.Delivered+*rep.Duplicated, *rep.Deliveries, "deliveries are the events plus their duplicates")
	require.NotNil(t, rep.OutOfOrder)
	require.Equal(t, 3, rep.Kills, "every kill happened")
	require.GreaterOrEqual(t, rep.Restarts, rep.Kills, "every killed relay was restarted")
	return rep
}

func TestCheckPassesAndDropsItsScratchSchema(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, func(t *testing.T, db []string) {
		res := run(t, nil, checkArgs(db)...)
		rep := requireSaneCheck(t, res)
		require.Empty(t, rep.ProxySkipped)
		require.Equal(t, 1, rep.Resets)
		require.Equal(t, 1, rep.Blackholes)
		require.Equal(t, 1, rep.Refusals)
		require.Regexp(t, `^outbox_check_[0-9a-f]{12}$`, rep.Scratch)
		require.False(t, schemaExists(t, rep.Scratch), "the scratch schema is dropped")
	})
}

func TestCheckKeepLeavesTheScratchSchema(t *testing.T) {
	t.Parallel()
	// The local server trusts every connection: a password in the URL
	// is ignored by the server, and must never be shown.
	u, err := url.Parse(testutil.DatabaseURL())
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), "check-secret-pw")
	res := run(t, nil, "--database-url", u.String(), "check", "--json",
		"--events", "50", "--duration", "500ms", "--kills", "0", "--cuts", "0", "--relays", "1", "--keep")
	require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	require.NotContains(t, res.stdout+res.stderr, "check-secret-pw")
	rep := parseCheckReport(t, res)
	require.True(t, rep.Kept)
	var s outbox.Stats
	require.Equal(t, "no faults were asked for", rep.ProxySkipped)
	t.Cleanup(func() {
		_, err := testutil.Pool(t).Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{rep.Scratch}.Sanitize()+` CASCADE`)
		require.NoError(t, err)
	})
	require.True(t, schemaExists(t, rep.Scratch))
	s, err = outbox.NewManager(outbox.Postgres(testutil.Pool(t)), outbox.ManagerConfig{Schema: rep.Scratch}).Stats(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 50, s.Processed, "the kept outbox holds the run's events")
}

func TestCheckFailsOnALostEvent(t *testing.T) {
	t.Parallel()
	// The receiver acknowledges the 7th event and forgets it: the relay
	// marks it processed, and only the check's count can tell.
	res := run(t, []string{"OUTBOX_CHECK_TEST_DROP=7"}, checkArgs([]string{"--database-url", testutil.DatabaseURL()})...)
	require.Equal(t, 1, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	require.Contains(t, res.stderr, "outbox: check failed: 1 lost, 0 ghost events")
	rep := parseCheckReport(t, res)
	require.False(t, rep.Passed)
	require.Equal(t, 1, rep.Lost)
	require.Len(t, rep.LostIDs, 1)
	require.Equal(t, 299, rep.Delivered)
	require.Zero(t, rep.Ghosts)
	require.False(t, schemaExists(t, rep.Scratch), "the scratch schema is dropped after a failure too")
}

func TestCheckThroughASinkVerifiesByAcknowledgements(t *testing.T) {
	t.Parallel()
	res := run(t, nil, checkArgs([]string{"--database-url", testutil.DatabaseURL()}, "--sink", "stdout:")...)
	require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	rep := parseCheckReport(t, res)
	require.True(t, rep.Passed)
	require.Equal(t, "acknowledgements", rep.VerifiedBy)
	require.Equal(t, 300, rep.Delivered, "every event acknowledged and marked processed")
	require.Zero(t, rep.Lost)
	require.Nil(t, rep.Duplicated, "a foreign sink's duplicates cannot be counted")
	require.Nil(t, rep.Deliveries)
	require.Nil(t, rep.OutOfOrder)
	require.Equal(t, 3, rep.Kills)
}

// scratchLog finds the scratch name in the check's log.
var scratchLog = regexp.MustCompile(`scratch=(outbox_check_[0-9a-f]{12})`)

// waitScratch waits until the check has logged its scratch schema.
func waitScratch(t *testing.T, p *process) string {
	t.Helper()
	var schema string
	testutil.WaitFor(t, 30*time.Second, "the check's scratch schema", func() bool {
		require.False(t, p.exited(), "check exited; stderr:\n%s", p.stderr.String())
		m := scratchLog.FindStringSubmatch(p.stderr.String())
		if m != nil {
			schema = m[1]
		}
		return m != nil
	})
	return schema
}

func TestCheckFailsOnAGhostEvent(t *testing.T) {
	t.Parallel()
	p := start(t, nil, "--database-url", testutil.DatabaseURL(), "check", "--json",
		"--events", "200", "--duration", "4s", "--kills", "1", "--cuts", "1")
	schema := waitScratch(t, p)
	// An event the check did not write appears in its outbox.
	ctx := context.Background()
	tx, err := testutil.Pool(t).Begin(ctx)
	require.NoError(t, err)
	_, err = outbox.NewWriter(outbox.WriterConfig{Schema: schema}).Write(ctx, tx,
		outbox.Message{EventType: "outbox.check", AggregateType: "outbox_check", AggregateID: "agg-1", Payload: map[string]int{"seq": 1}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("check did not finish; stderr:\n%s", p.stderr.String())
	}
	require.Equal(t, 1, p.cmd.ProcessState.ExitCode(), "stdout:\n%s\nstderr:\n%s", p.stdout.String(), p.stderr.String())
	rep := parseCheckReport(t, result{stdout: p.stdout.String(), stderr: p.stderr.String()})
	require.Zero(t, rep.Lost)
	require.GreaterOrEqual(t, rep.Ghosts, 1)
	require.False(t, schemaExists(t, schema))
}

func TestCheckRidesOutADatabaseRestart(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{})
	p := start(t, nil, "--database-url", c.URL(), "check", "--json",
		"--events", "2000", "--duration", "6s", "--kills", "2", "--cuts", "1")
	waitScratch(t, p)
	testutil.WaitFor(t, 30*time.Second, "writing started", func() bool {
		return strings.Contains(p.stderr.String(), "writing events")
	})
	// The check writes a batch every few milliseconds: the restart fails
	// some of them, and the relays lose their connections.
	c.Restart(t)
	select {
	case <-p.done:
	case <-time.After(90 * time.Second):
		t.Fatalf("check did not finish; stderr:\n%s", p.stderr.String())
	}
	require.Equal(t, 0, p.cmd.ProcessState.ExitCode(), "stdout:\n%s\nstderr:\n%s", p.stdout.String(), p.stderr.String())
	var rep struct {
		checkReport
		WriteRetries int `json:"write_retries"`
	}
	require.NoError(t, json.Unmarshal([]byte(p.stdout.String()), &rep))
	require.Positive(t, rep.WriteRetries, "the writes failed during the restart and were retried")
	require.Equal(t, 2000, rep.Written)
	require.Equal(t, 2000, rep.Delivered)
	require.Zero(t, rep.Lost)
	require.Zero(t, rep.Ghosts)
}

func TestCheckInterruptedReportsAndDrops(t *testing.T) {
	t.Parallel()
	p := start(t, nil, "--database-url", testutil.DatabaseURL(), "check",
		"--events", "100000", "--duration", "2m", "--kills", "2", "--cuts", "2")
	schema := waitScratch(t, p)
	testutil.WaitFor(t, 30*time.Second, "writing started", func() bool {
		return regexp.MustCompile(`writing events`).MatchString(p.stderr.String())
	})
	require.Equal(t, 130, p.stop(t, syscall.SIGINT), "stderr:\n%s", p.stderr.String())
	require.Contains(t, p.stdout.String(), "INTERRUPTED: partial report")
	require.Contains(t, p.stdout.String(), "not counted: interrupted")
	require.Contains(t, p.stderr.String(), "outbox: interrupted: the check stopped before it finished")
	require.False(t, schemaExists(t, schema), "the scratch schema is dropped after Ctrl-C")
}

func TestCheckSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res := run(t, nil, checkArgs([]string{"--database-url", "sqlite://" + filepath.Join(dir, "app.db")})...)
	rep := requireSaneCheck(t, res)
	require.Equal(t, "SQLite has no network connection", rep.ProxySkipped)
	require.Equal(t, dir, filepath.Dir(rep.Scratch), "the scratch file is beside the database file")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "the scratch file is removed, and the user's file never created")
}

func TestCheckMariaDB(t *testing.T) {
	t.Parallel()
	admin := mariaDBAdmin(t)
	cfg, err := mysql.ParseDSN(drivertest.MySQLDSN())
	require.NoError(t, err)
	res := run(t, nil, checkArgs([]string{"--database-url", mariaDBURL(t, cfg.DBName)})...)
	rep := requireSaneCheck(t, res)
	require.Empty(t, rep.ProxySkipped, "the relays reach MariaDB through the fault proxy")
	require.Equal(t, 3, rep.Resets+rep.Refusals+rep.Blackholes)
	require.Empty(t, mariaDBDatabases(t, admin, rep.Scratch), "the scratch database is dropped")
}

func TestCheckUsage(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", testutil.DatabaseURL()}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "--events", "0"}, "invalid --events 0: use a positive value"},
		{[]string{"check", "--kills", "-1"}, "invalid --kills -1: use 0 or more"},
		{[]string{"--schema", "app", "check"}, "invalid --schema: outbox check creates a scratch outbox of its own"},
		{[]string{"check", "--sink", ""}, "invalid --sink: is empty"},
	} {
		requireFail(t, run(t, nil, append(db, tc.args...)...), 2, tc.want)
	}
	// A relay that refuses its arguments ends the check as bad usage, and
	// the scratch schema is still dropped.
	res := run(t, nil, append(db, "check", "--duration", "1s", "--events", "10", "--relay-arg=--no-such-flag")...)
	require.Equal(t, 2, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	require.Contains(t, res.stderr, "a relay refused its arguments")
	require.Contains(t, res.stderr, "--no-such-flag")
	require.Empty(t, res.stdout, "nothing to report")
	m := scratchLog.FindStringSubmatch(res.stderr)
	require.NotNil(t, m, "stderr:\n%s", res.stderr)
	require.False(t, schemaExists(t, m[1]))
}

// TestCheckSoak is the long variant of the chaos check: set
// OUTBOX_TEST_SOAK to a duration (such as 10m) to run outbox check that long,
// with events, relay kills and connection cuts scaled to it, against
// PostgreSQL directly and through PgBouncer. The default suite skips it;
// DEVELOPERS.md documents it.
func TestCheckSoak(t *testing.T) {
	raw := os.Getenv("OUTBOX_TEST_SOAK")
	if raw == "" {
		t.Skip("a soak test: set OUTBOX_TEST_SOAK=10m (any duration) to run it")
	}
	d, err := time.ParseDuration(raw)
	require.NoError(t, err, "OUTBOX_TEST_SOAK must be a duration such as 10m")
	t.Parallel()
	minutes := max(int(d/time.Minute), 1)
	forEachDatabase(t, func(t *testing.T, db []string) {
		args := append(append([]string{}, db...), "check", "--json", "--log-level", "warn",
			"--events", strconv.Itoa(20000*minutes), "--aggregates", "64", "--relays", "4", "--duration", d.String(),
			"--kills", strconv.Itoa(12*minutes), "--cuts", strconv.Itoa(6*minutes), "--drain-timeout", "5m")
		res := run(t, nil, args...)
		require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
		rep := parseCheckReport(t, res)
		require.True(t, rep.Passed)
		require.Equal(t, 20000*minutes, rep.Written)
		require.Equal(t, rep.Written, rep.Delivered, "every event delivered")
		require.Zero(t, rep.Lost)
		require.Zero(t, rep.Ghosts)
		require.Equal(t, 12*minutes, rep.Kills, "every kill happened")
		t.Logf("soak %v: %+v", d, rep)
	})
}
