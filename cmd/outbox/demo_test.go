package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
)

func TestDemoRunsToCompletionTwice(t *testing.T) {
	t.Parallel()
	schema := testutil.EmptySchemaName(t)
	for range 2 { // re-runnable
		res := run(t, nil, "demo", "--database-url", testutil.DatabaseURL(), "--schema", schema)
		require.Equal(t, 0, res.code, "stderr:\n%s", res.stderr)

		var aggregates []string
		for _, line := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
			var ev struct {
				EventType   string `json:"event_type"`
				AggregateID string `json:"aggregate_id"`
			}
			require.NoError(t, json.Unmarshal([]byte(line), &ev), "stdout holds JSON lines only: %q", line)
			require.Equal(t, "order.created", ev.EventType)
			aggregates = append(aggregates, ev.AggregateID)
		}
		require.ElementsMatch(t, []string{"1001", "1002", "1004"}, aggregates, "the rolled-back order 1003 has no event")

		require.Contains(t, res.stderr, "rolled back")
		require.Contains(t, res.stderr, "skipped as a duplicate")
		require.Contains(t, res.stderr, "stats: pending 0, processing 0, processed 3, failed 0\n")
		// The hint repeats the database URL, so the next command reads the
		// same database.
		require.Contains(t, res.stderr, "events list --database-url '"+testutil.DatabaseURL()+"' --schema "+schema)
	}
}

func TestDemoHintNamesTheCommandOnThePath(t *testing.T) {
	t.Parallel()
	schema := testutil.EmptySchemaName(t)
	res := run(t, []string{"PATH=" + filepath.Dir(binary) + ":" + os.Getenv("PATH")},
		"demo", "--database-url", testutil.DatabaseURL(), "--schema", schema)
	require.Equal(t, 0, res.code, "stderr:\n%s", res.stderr)
	require.Contains(t, res.stderr, "next: outbox events list --database-url ")
	require.Contains(t, res.stderr, "(applied 001, 002, 003, 004")
}

func TestDemoRefusesSchemaItDidNotCreate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := outboxCmd(t, b.schema, "demo")
	require.Equal(t, 2, res.code)
	require.Contains(t, res.stderr, `outbox: schema "`+b.schema+`" exists and was not created by outbox demo`)
	require.Zero(t, b.stats(t).Pending+b.stats(t).Processed)
}

// TestDemoRunsOnEmbeddedSQLite is `go run ./cmd/outbox demo` on a machine
// with no database server: no URL, an SQLite file in a temporary directory,
// which the other commands then read.
func TestDemoRunsOnEmbeddedSQLite(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "demo")
	require.Equal(t, 0, res.code, "stderr:\n%s", res.stderr)
	m := regexp.MustCompile(`embedded SQLite database, (\S+demo\.db)`).FindStringSubmatch(res.stderr)
	require.NotNil(t, m, res.stderr)
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(m[1])) })
	require.Len(t, strings.Split(strings.TrimSpace(res.stdout), "\n"), 3, res.stdout)
	require.NotContains(t, res.stdout, `"aggregate_id":"1003"`)
	require.Contains(t, res.stderr, "skipped as a duplicate")
	require.Contains(t, res.stderr, "stats: pending 0, processing 0, processed 3, failed 0\n")
	require.Contains(t, res.stderr, "(applied 001, 002, 004", "SQLite skips PostgreSQL's 003")
	// Not on the PATH: the hint names the binary by the path it ran as.
	require.Contains(t, res.stderr, "next: "+binary+" events list --database-url sqlite://"+m[1])

	stats := run(t, nil, "--database-url", "sqlite://"+m[1], "stats", "--json")
	requireOK(t, stats)
	require.Contains(t, stats.stdout, `"processed": 3`)
}

func TestDemoRefusesOtherDatabasesOfTheUser(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "--database-url", "sqlite:///tmp/yours.db", "demo")
	requireFail(t, res, 2, "outbox demo runs on PostgreSQL")
}
