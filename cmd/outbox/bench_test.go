package main_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

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
	requireOK(t, res)

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
	requireOK(t, res)
	for _, want := range []string{"outbox bench on PostgreSQL", "\ndrain ", "\nlatency ", "relay/reference",
		"commit→ack", "p99", "peak RSS", "note: "} {
		require.Contains(t, res.stdout, want)
	}
	// drain runs its reference even when only drain is asked for, but
	// reports only what was asked for.
	require.NotContains(t, res.stdout, "\nreference ")
	require.Empty(t, schemasWithPrefix(t, prefix))
}

// Any relay sink URL works: stdout gets the events, then the report.
func TestBenchOtherSink(t *testing.T) {
	t.Parallel()
	prefix := benchPrefix(t)
	res := run(t, nil, "--database-url", testutil.DatabaseURL(), "bench", "--events", "5", "--sink", "stdout:",
		"--schema-prefix", prefix, "--json", "reference")
	requireOK(t, res)
	require.Equal(t, 5, strings.Count(res.stdout, `"order.created"`), res.stdout)
	require.Contains(t, res.stdout, `"sink": "stdout:"`)
}

func TestBenchInterruptDropsSchema(t *testing.T) {
	t.Parallel()
	prefix := benchPrefix(t)
	// Far more events than the test waits for: the pre-fill is still
	// running when the signal comes.
	p := start(t, nil, "--database-url", testutil.DatabaseURL(), "bench", "--events", "20000000",
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
	require.Equal(t, 1, p.stop(t, os.Interrupt))
	line := strings.TrimSuffix(p.stderr.String(), "\n")
	require.NotContains(t, line, "\n", "one error line:\n%s", line)
	require.True(t, strings.HasPrefix(line, "outbox: interrupted"), line)
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
		{"unknown scenario", append(db, "drain", "sprint"), []string{`unknown scenario "sprint": use reference, drain, steady, latency or all`}},
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
	requireOK(t, res)
	for _, flag := range []string{"--events", "--batch-size", "--workers", "--writers", "--payload-size", "--duration",
		"--rate", "--retention", "--wake", "--poll-interval", "--sink", "--schema-prefix", "--json"} {
		require.Contains(t, res.stdout, flag)
	}
	// Defaults come from the bench package.
	require.Contains(t, res.stdout, "(default 200000)")
	require.Contains(t, res.stdout, `(default "discard:")`)
	require.Contains(t, res.stdout, "(default 10ms)")
}
