package main_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
)

// TestConfigFileEveryCommand: --config is global; every command takes the
// database and log settings from the file when neither a flag nor an
// environment variable sets them, and ignores the relay's settings.
func TestConfigFileEveryCommand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.writeN(t, 3)
	// The relay's sections hold a secret this shell does not have and a
	// value only the relay checks: other commands leave them alone.
	path := configFile(t, `database:
  url: ${CLI_TEST_DATABASE_URL}
  schema: `+b.schema+`
sink:
  url: https://hooks.example.com/x
  webhook_secret: ${CLI_TEST_UNSET_SECRET}
relay:
  batch_size: 0
`)
	dbEnv := "CLI_TEST_DATABASE_URL=" + testutil.DatabaseURL()

	res := run(t, []string{dbEnv}, "--config", path, "stats")
	requireOK(t, res)
	require.Regexp(t, `(?m)^pending +3$`, res.stdout)

	res = run(t, []string{dbEnv}, "events", "list", "--json", "--config", path)
	requireOK(t, res)
	require.Equal(t, 3, strings.Count(res.stdout, `"event_type": "order.created"`), res.stdout)

	// The relay reads every key: the same file is an error for it.
	res = run(t, []string{dbEnv}, "--config", path, "relay")
	requireFail(t, res, 2, path+":6: sink.webhook_secret: environment variable CLI_TEST_UNSET_SECRET is not set")
}

// TestConfigFileLosesToFlagsAndEnv: a flag wins over its environment
// variable, which wins over the file.
func TestConfigFileLosesToFlagsAndEnv(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.writeN(t, 2)
	// The file names an unreachable database and a missing schema.
	path := configFile(t, `database:
  url: postgres://nobody@127.0.0.1:1/none?connect_timeout=1
  schema: cli_test_no_such_schema
observability:
  log_level: debug
  log_format: json
`)
	db := testutil.DatabaseURL()
	for _, tt := range []struct {
		name string
		env  []string
		args []string
	}{
		{"flags", nil, []string{"--database-url", db, "--schema", b.schema, "--log-level", "info"}},
		{"environment", []string{"OUTBOX_DATABASE_URL=" + db, "OUTBOX_SCHEMA=" + b.schema, "OUTBOX_LOG_LEVEL=info"}, nil},
		{"flag over environment", []string{"OUTBOX_DATABASE_URL=postgres://nobody@127.0.0.1:1/none", "OUTBOX_SCHEMA=nope", "OUTBOX_LOG_LEVEL=debug"},
			[]string{"--database-url", db, "--schema", b.schema, "--log-level", "warn"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, tt.env, append([]string{"--config", path, "stats"}, tt.args...)...)
			requireOK(t, res) // no debug log: the level did not come from the file
			require.Regexp(t, `(?m)^pending +2$`, res.stdout)
		})
	}

	// The file's log settings apply when nothing else sets them.
	res := run(t, []string{"OUTBOX_DATABASE_URL=" + db, "OUTBOX_SCHEMA=" + b.schema}, "--config", path, "stats")
	require.Equal(t, 0, res.code, res.stderr)
	line, _, _ := strings.Cut(res.stderr, "\n")
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(line), &rec), "a JSON log line: %q", res.stderr)
	require.Equal(t, "DEBUG", rec["level"])
}

// TestConfigFileErrorsEveryCommand: a bad file is one clear line and exit
// 2 for every command, naming the file, the line and the key.
func TestConfigFileErrorsEveryCommand(t *testing.T) {
	t.Parallel()
	db := "OUTBOX_DATABASE_URL=" + testutil.DatabaseURL()
	for _, tt := range []struct {
		name, text string
		args       []string
		want       string
	}{
		{"unknown key", "database:\n  url: x\n  shema: s\n", []string{"stats"}, `:3: database: unknown key "shema": use one of url, schema, pgbouncer`},
		{"unknown relay key", "relay:\n  lease_time: 30s\n", []string{"events", "list"}, `:2: relay: unknown key "lease_time"`},
		{"unknown section", "databse:\n  url: x\n", []string{"purge", "--older-than", "1h"}, `:1: unknown section "databse"`},
		{"bad log level", "observability:\n  log_level: loud\n", []string{"stats"}, `:2: observability.log_level: unknown level "loud": use debug, info, warn, error`},
		{"bad log format", "observability:\n  log_format: xml\n", []string{"version"}, `:2: observability.log_format: unknown format "xml": use text, json`},
		{"bad pgbouncer", "database:\n  pgbouncer: maybe\n", []string{"stats"}, `:2: database.pgbouncer: "maybe" is not a boolean`},
		{"syntax", "database:\n  url: x\n   schema: y\n", []string{"stats"}, `:3: not valid YAML`},
		{"unset variable", "database:\n  url: ${CLI_TEST_UNSET_URL}\n", []string{"stats"}, `:2: database.url: environment variable CLI_TEST_UNSET_URL is not set`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := configFile(t, tt.text)
			res := run(t, []string{db}, append([]string{"--config", path}, tt.args...)...)
			requireFail(t, res, 2, path+tt.want)
			require.Empty(t, res.stdout)
		})
	}
	res := run(t, nil, "--config", "/nonexistent/outbox.yaml", "stats")
	requireFail(t, res, 2, "--config /nonexistent/outbox.yaml: no such file or directory")

	// A bad URL from the file is named by its key and line, password masked.
	path := configFile(t, "database:\n  url: postgres://bob:Sup3rS3cret@127.0.0.1:port/db\n")
	res = run(t, nil, "--config", path, "stats")
	requireFail(t, res, 2, "invalid database.url ("+path+":2): cannot parse")
	require.NotContains(t, res.stderr, "Sup3rS3cret")
	// Global settings from the file are named by their key and line.
	path = configFile(t, "database:\n  pgbouncer: true\n")
	res = run(t, []string{db}, "--config", path, "migrate")
	requireFail(t, res, 2, "invalid database.pgbouncer ("+path+":2): outbox migrate holds a session's advisory lock")
	path = configFile(t, "database:\n  schema: pg_catalog\n")
	res = run(t, []string{db}, "--config", path, "migrate")
	requireFail(t, res, 2, `invalid database.schema (`+path+`:2) "pg_catalog": PostgreSQL keeps that name for its own catalogs`)
	// Without a URL anywhere, the error says the file may hold one.
	res = run(t, nil, "--config", configFile(t, "database:\n  schema: s\n"), "stats")
	requireFail(t, res, 2, "no database: pass --database-url or set OUTBOX_DATABASE_URL (or database.url in the --config file)")
}
