package main_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
)

func TestHelpPrintsUsage(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "--help")
	requireOK(t, res)
	for _, cmd := range []string{"migrate", "relay", "stats", "events", "purge", "version", "demo", "admin", "check"} {
		require.Contains(t, res.stdout, "\n  "+cmd+" ")
	}
	for _, flag := range []string{"--database-url", "--schema", "--log-format", "--log-level"} {
		require.Contains(t, res.stdout, flag)
	}

	require.NotContains(t, res.stdout, "outbox [flags]")

	res = run(t, nil, "relay", "--help")
	requireOK(t, res)
	help := run(t, nil, "help", "relay")
	requireOK(t, help)
	require.Equal(t, res.stdout, help.stdout)
	for _, flag := range []string{"--sink ", "--batch-size", "--poll-interval", "--lease", "--sink-timeout", "--max-attempts",
		"--backoff-base", "--backoff-max", "--relay-id", "--workers", "--webhook-secret", "--sink-concurrency", "--source"} {
		require.Contains(t, res.stdout, flag)
	}
	// Defaults come from the outbox package.
	require.Contains(t, res.stdout, "(default 100)")
	require.Contains(t, res.stdout, "(default 30s)")
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", testutil.DatabaseURL()}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"no command", nil, []string{"missing command: use one of admin, ", "demo, events, inbox, migrate, purge, receive, relay, stats, version"}},
		{"unknown command", []string{"bogus"}, []string{`unknown command "bogus" for "outbox"`}},
		{"misspelled command", []string{"stat"}, []string{`did you mean "stats"?`}},
		{"unknown subcommand", []string{"events", "lst"}, []string{`unknown command "lst" for "outbox events"`, `did you mean "list"?`}},
		{"no subcommand", []string{"events"}, []string{"missing command: use one of discard, list, replay, retry, show"}},
		{"unknown help topic", []string{"help", "nonsense"}, []string{`unknown command "nonsense" for "outbox"`}},
		{"unknown flag", []string{"stats", "--bogus"}, []string{"unknown flag: --bogus"}},
		{"unknown global flag", []string{"--bogus", "stats"}, []string{"unknown flag: --bogus"}},
		{"extra argument", append(db, "stats", "extra"), []string{`unknown command "extra" for "outbox stats"`}},
		{"bad flag value", append(db, "relay", "--sink", "stdout:", "--batch-size", "many"), []string{`invalid argument "many" for "--batch-size"`}},
		{"bad duration flag", append(db, "relay", "--sink", "stdout:", "--lease", "long"), []string{`invalid argument "long" for "--lease"`}},
		{"zero flag", append(db, "relay", "--sink", "stdout:", "--workers", "0"), []string{"invalid --workers 0: use a positive value"}},
		{"bad log format", append(db, "--log-format", "xml", "stats"), []string{`invalid --log-format "xml": use text or json`}},
		{"bad log level", append(db, "--log-level", "loud", "stats"), []string{`invalid --log-level "loud": use one of debug, info, warn, error`}},
		{"no database", []string{"stats"}, []string{"no database: pass --database-url or set OUTBOX_DATABASE_URL"}},
		{"no database for relay", []string{"relay", "--sink", "stdout:"}, []string{"no database: pass --database-url or set OUTBOX_DATABASE_URL"}},
		{"show without ID", append(db, "events", "show"), []string{"events show needs the event's ID: outbox events show ID"}},
		{"show with two IDs", append(db, "events", "show", "1", "2"), []string{"events show takes one ID, got 2"}},
		{"bad event ID", append(db, "events", "show", "abc"), []string{`invalid event ID "abc": use a positive integer`}},
		{"negative event ID", append(db, "events", "retry", "-5"), []string{"unknown shorthand flag"}},
		{"zero event ID", append(db, "events", "replay", "0"), []string{`invalid event ID "0"`}},
		{"retry nothing", append(db, "events", "retry"), []string{"pass event IDs or --status failed"}},
		{"retry both", append(db, "events", "retry", "1", "--status", "failed"), []string{"not both"}},
		{"retry other status", append(db, "events", "retry", "--status", "processed"), []string{`invalid --status "processed": retry takes failed events only`}},
		{"replay nothing", append(db, "events", "replay"), []string{"pass event IDs or --status processed"}},
		{"list bad limit", append(db, "events", "list", "--limit", "0"), []string{"invalid --limit 0"}},
		{"missing sink", append(db, "relay"), []string{"missing --sink"}},
		{"unknown sink scheme", append(db, "relay", "--sink", "kafkaa://broker:9092"), []string{`unknown sink scheme "kafkaa": use one of stdout, http, https, nats, kafka, amqp, amqps, redis, rediss, mqtt, mqtts`}},
		{"unknown bare sink", append(db, "relay", "--sink", "stdot"), []string{`unknown sink scheme "stdot": use one of stdout, http, https, nats, kafka`}},
		{"bad webhook source", append(db, "relay", "--sink", "https://hooks.example.com/h", "--source", " /x"), []string{"invalid --source:"}},
		{"webhook URL without host", append(db, "relay", "--sink", "http:///hook"), []string{"invalid --sink:", "no host"}},
		{"sink timeout equals lease", append(db, "relay", "--sink", "stdout:", "--lease", "5s", "--sink-timeout", "5s"),
			[]string{"invalid --sink-timeout: is 5s, not shorter than the lease (5s)"}},
		{"sink timeout above lease", append(db, "relay", "--sink", "stdout:", "--sink-timeout", "1m"),
			[]string{"invalid --sink-timeout: is 1m0s, not shorter than the lease (30s)"}},
		{"lease too short", append(db, "relay", "--sink", "stdout:", "--lease", "100ms"), []string{"invalid --lease: is 100ms: use at least 1s"}},
		{"backoff max below base", append(db, "relay", "--sink", "stdout:", "--backoff-base", "1m", "--backoff-max", "1s"), []string{"invalid --backoff-max"}},
		{"batch size too large", append(db, "relay", "--sink", "stdout:", "--batch-size", "20000"), []string{"invalid --batch-size: is 20000: use 1 to 10000"}},
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

func TestUnknownStatus(t *testing.T) {
	t.Parallel()
	valid := "use one of pending, processing, processed, failed"
	for _, args := range [][]string{
		{"events", "list", "--status", "done"},
		{"events", "retry", "--status", "done"},
		{"purge", "--older-than", "7d", "--status", "done"},
	} {
		t.Run(strings.Join(args[:2], "_"), func(t *testing.T) {
			t.Parallel()
			res := outboxCmd(t, "public", args...)
			requireFail(t, res, 2, `invalid --status: unknown status "done"`, valid)
		})
	}
}

func TestMissingTableSaysRunMigrate(t *testing.T) {
	t.Parallel()
	schema := testutil.EmptySchemaName(t)
	for _, args := range [][]string{
		{"stats"},
		{"events", "list"},
		{"events", "show", "1"},
		{"events", "retry", "1"},
		{"events", "retry", "--status", "failed"},
		{"events", "replay", "1"},
		{"purge", "--older-than", "7d"},
		{"relay", "--sink", "stdout:"},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			t.Parallel()
			res := outboxCmd(t, schema, args...)
			requireFail(t, res, 1, "outbox table not found", "run outbox migrate --schema "+schema)
		})
	}
}

// TestGlobalFlagsFromEnvironment: $OUTBOX_SCHEMA, $OUTBOX_LOG_LEVEL and
// $OUTBOX_LOG_FORMAT stand for the global flags, which win over them.
func TestGlobalFlagsFromEnvironment(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.writeN(t, 2)
	db := []string{"--database-url", testutil.DatabaseURL()}

	res := run(t, []string{"OUTBOX_SCHEMA=" + b.schema}, append(db, "stats", "--json")...)
	requireOK(t, res)
	require.Contains(t, res.stdout, `"pending": 2`)

	// The flag wins.
	res = run(t, []string{"OUTBOX_SCHEMA=no_such_schema"}, append(db, "--schema", b.schema, "stats", "--json")...)
	requireOK(t, res)

	res = run(t, []string{"OUTBOX_SCHEMA=" + b.schema, "OUTBOX_LOG_LEVEL=debug", "OUTBOX_LOG_FORMAT=json"}, append(db, "stats")...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stderr, `"level":"DEBUG"`)

	for _, tc := range []struct{ env, want string }{
		{"OUTBOX_LOG_LEVEL=loud", `invalid $OUTBOX_LOG_LEVEL "loud": use one of debug, info, warn, error`},
		{"OUTBOX_LOG_FORMAT=xml", `invalid $OUTBOX_LOG_FORMAT "xml": use one of text, json`},
		{"OUTBOX_SCHEMA=", "$OUTBOX_SCHEMA is set but empty: give it a value or unset it"},
	} {
		res := run(t, []string{tc.env}, append(db, "stats")...)
		requireFail(t, res, 2, tc.want)
	}
}
