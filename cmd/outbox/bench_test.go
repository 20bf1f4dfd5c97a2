package main_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/internal/testutil"
)

// benchPrefix returns a scratch-schema prefix of the test's own, and drops
// whatever a failed run left behind under it at cleanup.
func benchPrefix(t *testing.T) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "outbox_bench_c" + hex.EncodeToString(b[:]) + "_"
	t.Cleanup(func() {
		for _, s := range schemasWithPrefix(t, prefix) {
			testutil.DropSchema(t, testutil.Pool(t), s)
		}
	})
	return prefix
}

func schemasWithPrefix(t *testing.T, prefix string) []string {
	t.Helper()
	rows, err := testutil.Pool(t).Query(context.Background(), `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)`, prefix)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

func schemaExists(t *testing.T, name string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, testutil.Pool(t).QueryRow(context.Background(),
		`SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, name).Scan(&ok))
	return ok
}

func TestBenchJSON(t *testing.T) {
	t.Parallel()
	prefix := benchPrefix(t)
	res := run(t, nil, "--database-url", testutil.DatabaseURL(), "bench", "--events", "300", "--batch-size", "100",
		"--duration", "1s", "--schema-prefix", prefix, "--json", "drain", "reference")
	requireBenchOK(t, res)

	var doc struct {
		Settings   map[string]any   `json:"settings"`
		Server     string           `json:"server"`
		Notes      []string         `json:"notes"`
		Scenarios  []map[string]any `json:"scenarios"`
		Autovacuum *bool            `json:"autovacuum"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
	require.EqualValues(t, 300, doc.Settings["events"])
	require.EqualValues(t, 100, doc.Settings["batch_size"])
	require.Equal(t, "discard:", doc.Settings["sink"])
	require.NotEmpty(t, doc.Server)
	require.NotNil(t, doc.Autovacuum)
	require.NotEmpty(t, doc.Notes)

	// Run order: the reference, then the drain it is compared with.
	require.Len(t, doc.Scenarios, 2)
	ref, drain := doc.Scenarios[0], doc.Scenarios[1]
	require.Equal(t, "reference", ref["scenario"])
	require.Equal(t, "drain", drain["scenario"])
	for _, sc := range doc.Scenarios {
		require.Equal(t, "processed", sc["retention"])
		require.EqualValues(t, 300, sc["events"], "every event delivered")
		require.EqualValues(t, 0, sc["duplicates"])
		require.Positive(t, sc["events_per_s"])
		require.Positive(t, sc["rss_peak_bytes"])
		require.Contains(t, sc, "table")
		schema, _ := sc["schema"].(string)
		require.True(t, strings.HasPrefix(schema, prefix), "scratch schema %q", schema)
		require.False(t, schemaExists(t, schema), "scratch schema %s dropped", schema)
	}
	require.NotEqual(t, ref["schema"], drain["schema"], "each scenario on a fresh schema")
	require.NotContains(t, ref, "ratio_to_reference")
	require.Equal(t, ref["events_per_s"], drain["reference_events_per_s"])
	require.InDelta(t, drain["events_per_s"].(float64)/ref["events_per_s"].(float64), drain["ratio_to_reference"], 1e-9)
	require.Empty(t, schemasWithPrefix(t, prefix))
}

func TestBenchTable(t *testing.T) {
	t.Parallel()
	prefix := benchPrefix(t)
	res := run(t, nil, "--database-url", testutil.DatabaseURL(), "bench", "--events", "200", "--duration", "1s",
		"--writers", "2", "--rate", "100", "--schema-prefix", prefix, "latency", "drain")
	requireBenchOK(t, res)
	for _, want := range []string{"outbox bench on PostgreSQL", "\ndrain ", "\nlatency ", "relay/reference",
		"commit→ack", "p99", "peak RSS", "note: "} {
		require.Contains(t, res.stdout, want)
	}
	// drain runs its reference even when only drain is asked for, but
	// reports only what was asked for.
	require.NotContains(t, res.stdout, "\nreference ")
	require.Empty(t, schemasWithPrefix(t, prefix))
}

// --timeline writes every measured event of each latency run as CSV.
func TestBenchTimeline(t *testing.T) {
	t.Parallel()
	prefix := benchPrefix(t)
	path := filepath.Join(t.TempDir(), "timeline.csv")
	res := run(t, nil, "--database-url", testutil.DatabaseURL(), "bench", "--duration", "1s", "--writers", "2",
		"--rate", "100", "--ordered-keys", "5", "--schema-prefix", prefix, "--timeline", path, "--json", "latency")
	requireBenchOK(t, res)
	var out struct {
		Scenarios []map[string]any `json:"scenarios"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
	require.Len(t, out.Scenarios, 2)

	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{"wake", "ordering", "keys", "event_id", "committed_at", "latency_ms"}, rows[0])
	perRun := map[string][]float64{}
	ids := map[string]bool{}
	for _, row := range rows[1:] {
		require.Equal(t, "poll", row[0])
		key := row[1] + "/" + row[2]
		require.Contains(t, []string{"none/0", "aggregate/5"}, key)
		require.False(t, ids[key+"/"+row[3]], "event %s twice in one run", row[3])
		ids[key+"/"+row[3]] = true
		_, err := time.Parse(time.RFC3339Nano, row[4])
		require.NoError(t, err)
		lat, err := strconv.ParseFloat(row[5], 64)
		require.NoError(t, err)
		require.GreaterOrEqual(t, lat, 0.0)
		perRun[key] = append(perRun[key], lat)
	}
	for i, key := range []string{"none/0", "aggregate/5"} {
		rep := out.Scenarios[i]
		lats := perRun[key]
		require.Len(t, lats, int(rep["latency_count"].(float64)), "every measured event of %s", key)
		slices.Sort(lats)
		require.InDelta(t, rep["max_ms"].(float64), lats[len(lats)-1], 0.001, "the report's max is the timeline's")
	}
	require.Empty(t, schemasWithPrefix(t, prefix))
}

// Any relay sink URL works: stdout gets the events, then the report.
func TestBenchOtherSink(t *testing.T) {
	t.Parallel()
	prefix := benchPrefix(t)
	res := run(t, nil, "--database-url", testutil.DatabaseURL(), "bench", "--events", "5", "--sink", "stdout:",
		"--schema-prefix", prefix, "--json", "reference")
	requireBenchOK(t, res)
	require.Equal(t, 5, strings.Count(res.stdout, `"order.created"`), res.stdout)
	require.Contains(t, res.stdout, `"sink": "stdout:"`)
}

func TestBenchInterruptDropsSchema(t *testing.T) {
	t.Parallel()
	prefix := benchPrefix(t)
	// Far more events than the test waits for: the pre-fill is still
	// running when the signal comes.
	p := start(t, nil, "--database-url", testutil.DatabaseURL(), "bench", "--events", "10000000",
		"--schema-prefix", prefix, "drain")
	testutil.WaitFor(t, 30*time.Second, "the scratch schema", func() bool {
		for _, s := range schemasWithPrefix(t, prefix) {
			var migrated bool
			require.NoError(t, testutil.Pool(t).QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`,
				pgx.Identifier{s, "outbox_events"}.Sanitize()).Scan(&migrated))
			if migrated {
				return true
			}
		}
		return false
	})
	require.Equal(t, 130, p.stop(t, os.Interrupt))
	requireBenchInterrupted(t, p.stderr.String(), "no scenario finished")
	require.Empty(t, p.stdout.String())
	require.Empty(t, schemasWithPrefix(t, prefix), "the scratch schema is dropped on Ctrl-C")
}

func TestBenchUsageErrors(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", testutil.DatabaseURL(), "bench"}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"unknown scenario", append(db, "drain", "sprint"), []string{`unknown scenario "sprint": use reference, reference-minimal, sink, drain, steady, latency, receive, tenants or all`}},
		{"bad retention", append(db, "--retention", "forever"), []string{`invalid --retention: unknown retention mode "forever": use processed, delete, archive or all`}},
		{"bad wake", append(db, "--wake", "sometimes"), []string{`invalid --wake: unknown wake-up mode "sometimes": use poll, listen, process or all`}},
		{"zero events", append(db, "--events", "0"), []string{"invalid --events 0: use a positive value"}},
		{"negative rate", append(db, "--rate", "-5"), []string{"invalid --rate -5: use a positive value"}},
		{"zero duration", append(db, "--duration", "0s"), []string{"invalid --duration 0s: use a positive value"}},
		{"bad duration", append(db, "--duration", "soon"), []string{`invalid argument "soon" for "--duration"`}},
		{"batch too large", append(db, "--batch-size", "20000"), []string{"invalid --batch-size: is 20000: use 1 to 10000"}},
		{"payload too small", append(db, "--payload-size", "3"), []string{"invalid --payload-size: is 3: use at least 16 bytes"}},
		{"bad schema prefix", append(db, "--schema-prefix", "Bench-"), []string{`invalid --schema-prefix: is "Bench-"`}},
		{"empty schema prefix", append(db, "--schema-prefix", ""), []string{"invalid --schema-prefix: is empty"}},
		{"unknown sink scheme", append(db, "--sink", "kafkaa://broker:9092"), []string{`unknown sink scheme "kafkaa": use one of discard, stdout`}},
		{"no database", []string{"bench"}, []string{"no database: pass --database-url or set OUTBOX_DATABASE_URL"}},
		{"listen on sqlite", []string{"--database-url", "sqlite:///nonexistent/app.db", "bench", "--wake", "listen"},
			[]string{"invalid --wake: has listen, which needs PostgreSQL's LISTEN/NOTIFY: SQLite has none, use poll or process"}},
		{"listen on mysql", []string{"--database-url", "mysql://nobody@127.0.0.1:1/db", "bench", "--wake", "listen", "latency"},
			[]string{"invalid --wake: has listen, which needs PostgreSQL's LISTEN/NOTIFY: MySQL/MariaDB has none, use poll or process"}},
		{"bad sqlite url", []string{"--database-url", "sqlite://app.db", "bench"}, []string{"invalid --database-url", "names a host"}},
		{"reference-minimal on sqlite", []string{"--database-url", "sqlite:///nonexistent/app.db", "bench", "drain", "Reference-Minimal"},
			[]string{"invalid scenario reference-minimal: it runs on PostgreSQL only, not on SQLite"}},
		{"receive on sqlite", []string{"--database-url", "sqlite:///nonexistent/app.db", "bench", "Receive"},
			[]string{"invalid scenario receive: it runs on PostgreSQL only, not on SQLite"}},
		{"timeline without latency", append(db, "--timeline", "/tmp/unused.csv", "drain"),
			[]string{"--timeline records latency runs: name the latency scenario (or all)"}},
		{"timeline in no directory", append(db, "--timeline", "/nonexistent/dir/t.csv", "latency"),
			[]string{"invalid --timeline: open /nonexistent/dir/t.csv: no such file or directory: name a file in a directory you can write"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, nil, tt.args...)
			requireFail(t, res, 2, tt.want...)
			require.Empty(t, res.stdout)
		})
	}
}

func TestBenchHelp(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "bench", "--help")
	requireBenchOK(t, res)
	for _, flag := range []string{"--events", "--batch-size", "--workers", "--writers", "--payload-size", "--duration",
		"--rate", "--retention", "--wake", "--poll-interval", "--sink", "--schema-prefix", "--json"} {
		require.Contains(t, res.stdout, flag)
	}
	// Defaults come from the bench package.
	require.Contains(t, res.stdout, "(default 200000)")
	require.Contains(t, res.stdout, `(default "discard:")`)
	require.Contains(t, res.stdout, "(default 10ms)")
}

// benchDatabase is a database kind the bench runs on besides PostgreSQL:
// its URL, and a list of the scratch spaces left under a prefix.
type benchDatabase struct {
	url       string
	scratches func(t *testing.T, prefix string) []string
}

// benchDatabases returns SQLite (a file in a fresh directory that the bench
// must never create) and MariaDB (a database name that must never be
// created).
func benchDatabases(t *testing.T) map[string]benchDatabase {
	t.Helper()
	dir := t.TempDir()
	app := filepath.Join(dir, "app.db")
	admin := mariaDBAdmin(t)
	return map[string]benchDatabase{
		"sqlite": {url: "sqlite://" + app, scratches: func(t *testing.T, prefix string) []string {
			t.Helper()
			files, err := filepath.Glob(filepath.Join(dir, prefix+"*"))
			require.NoError(t, err)
			_, err = os.Stat(app)
			require.ErrorIs(t, err, os.ErrNotExist, "the URL's own file is never created")
			return files
		}},
		"mariadb": {url: mariaDBURL(t, "outbox_bench_never_created"), scratches: func(t *testing.T, prefix string) []string {
			t.Helper()
			require.Empty(t, mariaDBDatabases(t, admin, "outbox_bench_never_created"), "the URL's own database is never created")
			return mariaDBDatabases(t, admin, prefix)
		}},
	}
}

// mariaDBURL is a mysql:// URL for the test server (TEST_MYSQL_DSN) naming
// database.
func mariaDBURL(t *testing.T, database string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(drivertest.MySQLDSN())
	require.NoError(t, err, "TEST_MYSQL_DSN")
	u := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + database, User: url.User(cfg.User)}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	}
	return u.String()
}

// mariaDBAdmin is a pool on the test server with no database, closed when
// t ends.
func mariaDBAdmin(t *testing.T) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(drivertest.MySQLDSN())
	require.NoError(t, err, "TEST_MYSQL_DSN")
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.PingContext(context.Background()),
		"MariaDB is not reachable at TEST_MYSQL_DSN (default %s): start it or set TEST_MYSQL_DSN", drivertest.MySQLDSNDefault)
	return db
}

// mariaDBDatabases lists the databases whose name starts with prefix.
func mariaDBDatabases(t *testing.T, admin *sql.DB, prefix string) []string {
	t.Helper()
	rows, err := admin.QueryContext(context.Background(), `SELECT SCHEMA_NAME FROM information_schema.SCHEMATA`)
	require.NoError(t, err)
	defer func() { _ = rows.Close() }()
	var names []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		if strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
	}
	require.NoError(t, rows.Err())
	return names
}

// TestBenchSQLDatabases runs drain and reference through the binary on
// SQLite and MariaDB: every event delivered, the sizes each database
// tells, and no scratch file or database left.
func TestBenchSQLDatabases(t *testing.T) {
	t.Parallel()
	for kind, db := range benchDatabases(t) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			prefix := benchPrefix(t)
			t.Cleanup(func() { cleanupMariaDB(t, kind, prefix) })
			args := []string{"--database-url", db.url, "bench", "--events", "300", "--batch-size", "100",
				"--schema-prefix", prefix, "--json", "drain", "reference"}
			if kind == "mariadb" {
				// On a table this small MariaDB scans instead of looking up
				// each ID, so the relay's mark (REPEATABLE READ) can deadlock
				// with a concurrent claim; the relay retries and warns.
				args = append(args, "--log-level", "error")
			}
			res := run(t, nil, args...)
			requireBenchOK(t, res)

			var doc map[string]any
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
			require.Equal(t, kind, doc["database"])
			require.NotEmpty(t, doc["server"])
			require.NotContains(t, doc, "autovacuum", "autovacuum is PostgreSQL's")
			scenarios, _ := doc["scenarios"].([]any)
			require.Len(t, scenarios, 2)
			for i, want := range []string{"reference", "drain"} {
				sc := scenarios[i].(map[string]any)
				require.Equal(t, want, sc["scenario"])
				require.EqualValues(t, 300, sc["events"], "every event delivered")
				require.EqualValues(t, 0, sc["duplicates"])
				require.Positive(t, sc["events_per_s"])
				schema, _ := sc["schema"].(string)
				require.Contains(t, schema, prefix)
				table := sc["table"].(map[string]any)
				for _, reading := range []string{"before", "after"} {
					ts := table[reading].(map[string]any)
					require.Positive(t, ts["total_bytes"])
					require.NotContains(t, ts, "dead_tuples", "PostgreSQL only")
					require.NotContains(t, ts, "live_tuples", "PostgreSQL only")
					require.Equal(t, kind == "mariadb", ts["index_bytes"] != nil, "index_bytes: %v", ts)
				}
			}
			drain := scenarios[1].(map[string]any)
			require.Positive(t, drain["ratio_to_reference"])
			require.Empty(t, db.scratches(t, prefix), "scratch spaces removed")
		})
	}
}

// cleanupMariaDB drops what a failed MariaDB run left under prefix.
func cleanupMariaDB(t *testing.T, kind, prefix string) {
	if kind != "mariadb" {
		return
	}
	admin := mariaDBAdmin(t)
	for _, name := range mariaDBDatabases(t, admin, prefix) {
		_, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+name+"`")
	}
}

// On SQLite, --wake all means the modes SQLite has: poll and process.
func TestBenchSQLiteText(t *testing.T) {
	t.Parallel()
	db := benchDatabases(t)["sqlite"]
	prefix := benchPrefix(t)
	res := run(t, nil, "--database-url", db.url, "bench", "--events", "200", "--duration", "1s", "--writers", "2",
		"--rate", "100", "--wake", "all", "--schema-prefix", prefix, "latency", "drain")
	requireBenchOK(t, res)
	for _, want := range []string{"outbox bench on SQLite 3.", "\ndrain ", "relay/reference", "database file",
		"retention processed, wake poll", "retention processed, wake process", "commit→ack", "note: "} {
		require.Contains(t, res.stdout, want)
	}
	require.NotContains(t, res.stdout, "wake listen")
	require.NotContains(t, res.stdout, "live/dead tuples")
	require.Empty(t, db.scratches(t, prefix))
}

func TestBenchInterruptRemovesScratch(t *testing.T) {
	t.Parallel()
	for kind, db := range benchDatabases(t) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			prefix := benchPrefix(t)
			t.Cleanup(func() { cleanupMariaDB(t, kind, prefix) })
			// Far more events than the test waits for: the pre-fill is
			// still running when the signal comes.
			p := start(t, nil, "--database-url", db.url, "bench", "--events", "10000000",
				"--schema-prefix", prefix, "drain")
			testutil.WaitFor(t, 30*time.Second, "the pre-fill", func() bool {
				switch kind {
				case "sqlite":
					// The pre-fill's pages spill into the WAL.
					for _, f := range db.scratches(t, prefix) {
						if fi, err := os.Stat(f); err == nil && strings.HasSuffix(f, "-wal") && fi.Size() > 1<<20 {
							return true
						}
					}
				default:
					admin := mariaDBAdmin(t)
					for _, name := range db.scratches(t, prefix) {
						var n int
						require.NoError(t, admin.QueryRowContext(context.Background(), `SELECT count(*) FROM information_schema.TABLES
WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'outbox_events'`, name).Scan(&n))
						if n > 0 {
							return true
						}
					}
				}
				return false
			})
			require.Equal(t, 130, p.stop(t, os.Interrupt))
			requireBenchInterrupted(t, p.stderr.String(), "no scenario finished")
			require.Empty(t, p.stdout.String())
			require.Empty(t, db.scratches(t, prefix), "the scratch space is removed on Ctrl-C")
		})
	}
}

// requireBenchOK checks that a bench run succeeded and wrote nothing to
// stderr but its phase lines.
func requireBenchOK(t *testing.T, res result) {
	t.Helper()
	require.Equal(t, 0, res.code, "exit code; stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	for _, l := range strings.Split(strings.TrimSuffix(res.stderr, "\n"), "\n") {
		require.True(t, l == "" || strings.HasPrefix(l, "outbox bench: "), "stderr holds phase lines only:\n%s", res.stderr)
	}
}

// requireBenchInterrupted checks an interrupted bench's stderr: phase
// lines, then one error line saying it was interrupted.
func requireBenchInterrupted(t *testing.T, stderr, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	last := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(last, "outbox: interrupted: "), stderr)
	require.Contains(t, last, want)
	for _, l := range lines[:len(lines)-1] {
		require.True(t, strings.HasPrefix(l, "outbox bench: "), "phase lines, then one error line:\n%s", stderr)
	}
}

// TestBenchInterruptReportsFinishedScenarios: Ctrl-C during a later
// scenario keeps the report of those that finished, and exits 130.
func TestBenchInterruptReportsFinishedScenarios(t *testing.T) {
	t.Parallel()
	prefix := benchPrefix(t)
	p := start(t, nil, "--database-url", testutil.DatabaseURL(), "bench", "--events", "200", "--duration", "5m",
		"--schema-prefix", prefix, "--json", "reference", "latency")
	testutil.WaitFor(t, 60*time.Second, "the latency phase", func() bool {
		return strings.Contains(p.stderr.String(), "outbox bench: latency (")
	})
	require.Equal(t, 130, p.stop(t, os.Interrupt))
	requireBenchInterrupted(t, p.stderr.String(), "1 finished scenarios reported; the rest did not run")
	var res struct {
		Scenarios []struct {
			Scenario string `json:"scenario"`
		} `json:"scenarios"`
	}
	require.NoError(t, json.Unmarshal([]byte(p.stdout.String()), &res), p.stdout.String())
	require.Len(t, res.Scenarios, 1)
	require.Equal(t, "reference", res.Scenarios[0].Scenario)
	require.Empty(t, schemasWithPrefix(t, prefix), "the scratch schemas are dropped")
}

// bench drain sink reference-minimal with a broker's --sink URL: the sink
// scenario publishes through the sink the relay would open, a discard drain
// runs beside the drain, and the drain reports its limit and its ratio to
// it, in JSON and in text.
func TestBenchSinkLimit(t *testing.T) {
	t.Parallel()
	brokers := map[string]func(t *testing.T) string{
		"nats": func(t *testing.T) string {
			js := natsStream(t)
			return "nats://" + natsAddr() + "?stream=" + js.stream + "&route=" + js.prefix + ".{event_type}"
		},
		"redis": func(t *testing.T) string {
			opts, err := redis.ParseURL(redisURL())
			require.NoError(t, err)
			rdb := redis.NewClient(opts)
			t.Cleanup(func() { _ = rdb.Close() })
			key := "outbox-cli-bench-" + randomName()
			t.Cleanup(func() { _ = rdb.Del(context.Background(), key).Err() })
			return redisURL() + "?maxlen=1000&route=" + key
		},
	}
	for name, sinkURL := range brokers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			prefix := benchPrefix(t)
			sink := sinkURL(t)
			args := []string{"--database-url", testutil.DatabaseURL(), "bench", "--events", "300", "--batch-size", "100",
				"--schema-prefix", prefix, "--sink", sink, "drain", "sink", "reference-minimal"}
			res := run(t, nil, append(args, "--json")...)
			requireBenchOK(t, res)
			var doc struct {
				Settings    map[string]any   `json:"settings"`
				MachineCPUs int              `json:"machine_cpus"`
				Scenarios   []map[string]any `json:"scenarios"`
			}
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
			require.Positive(t, doc.MachineCPUs, "/proc/stat's cores")
			reported, _ := doc.Settings["sink"].(string)
			require.True(t, strings.HasPrefix(reported, name+"://") && strings.HasSuffix(reported, "?…"),
				"the sink without the URL's options: %q", reported)
			var got []string
			for _, sc := range doc.Scenarios {
				got = append(got, sc["scenario"].(string)+" "+fmt.Sprint(sc["sink"]))
				require.EqualValues(t, 300, sc["events"], "every event delivered")
				require.EqualValues(t, 0, sc["duplicates"])
				require.Positive(t, sc["events_per_s"])
			}
			require.Equal(t, []string{"reference-minimal <nil>", "sink <nil>", "drain discard:", "drain <nil>"}, got,
				"run order; the discard drain says so")
			sinkRep, discard, drain := doc.Scenarios[1], doc.Scenarios[2], doc.Scenarios[3]
			require.NotContains(t, discard, "limit_events_per_s")
			require.Equal(t, sinkRep["events_per_s"], drain["sink_events_per_s"])
			require.Equal(t, discard["events_per_s"], drain["discard_drain_events_per_s"])
			limit := min(sinkRep["events_per_s"].(float64), discard["events_per_s"].(float64))
			require.Equal(t, limit, drain["limit_events_per_s"])
			require.InDelta(t, drain["events_per_s"].(float64)/limit, drain["ratio_to_limit"], 1e-9)
			require.NotContains(t, discard, "cpu_limit_events_per_s")
			if cpuLimit, ok := drain["cpu_limit_events_per_s"].(float64); ok { // absent when a scenario this short saw no busy tick
				want := float64(doc.MachineCPUs) / (discard["machine_cpu_s_per_event"].(float64) + sinkRep["machine_cpu_s_per_event"].(float64))
				require.InDelta(t, want, cpuLimit, want*1e-9)
				require.InDelta(t, drain["events_per_s"].(float64)/cpuLimit, drain["ratio_to_cpu_limit"], 1e-9)
				require.Contains(t, drain, "discard_drain_cpu_s_per_event")
			}

			res = run(t, nil, args...)
			requireBenchOK(t, res)
			for _, want := range []string{"\nreference-minimal ", "\nsink ", "no database", "retention processed, sink discard:", "drain/limit",
				"the slower of the discard: drain"} {
				require.Contains(t, res.stdout, want)
			}
			require.Empty(t, schemasWithPrefix(t, prefix))
		})
	}
}
