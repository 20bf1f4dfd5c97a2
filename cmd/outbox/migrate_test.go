package main_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
)

func TestMigrateAppliesThenReportsUpToDate(t *testing.T) {
	t.Parallel()
	schema := testutil.EmptySchemaName(t)

	migrations := pgdriver.Migrations()
	latest := migrations[len(migrations)-1].Version
	var want strings.Builder
	for _, m := range migrations {
		fmt.Fprintf(&want, "applied migration %03d_%s to schema %q\n", m.Version, m.Name, schema)
	}
	fmt.Fprintf(&want, "schema is now at version %d\n", latest)

	res := outboxCmd(t, schema, "migrate")
	requireOK(t, res)
	require.Equal(t, want.String(), res.stdout)

	res = outboxCmd(t, schema, "migrate")
	requireOK(t, res)
	require.Equal(t, fmt.Sprintf("schema is up to date at version %d\n", latest), res.stdout)

	res = outboxCmd(t, schema, "stats", "--json")
	requireOK(t, res)
}

func TestMigratePrintNeedsNoDatabase(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "migrate", "--print", "--schema", "app_events")
	requireOK(t, res)
	require.Contains(t, res.stdout, `CREATE SCHEMA IF NOT EXISTS "app_events";`)
	require.Contains(t, res.stdout, `CREATE TABLE "app_events".outbox_events (`)
	require.Contains(t, res.stdout, "-- migration 001_create_outbox_events")
}

func TestMigrateReservedSchema(t *testing.T) {
	t.Parallel()
	for _, schema := range []string{"pg_catalog", "pg_temp", "information_schema"} {
		res := outboxCmd(t, schema, "migrate")
		requireFail(t, res, 2, fmt.Sprintf("outbox: invalid --schema %q: PostgreSQL keeps that name for its own catalogs; choose another schema", schema))
		require.NotContains(t, res.stderr, "outboxmigrate:")
	}
}

func TestMigrateErrorHasOnePrefix(t *testing.T) {
	t.Parallel()
	// A view where the table should be: the server refuses the
	// migration, and the error names the schema once, without the
	// library's own prefix after the CLI's.
	schema := testutil.EmptySchemaName(t)
	pool := testutil.Pool(t)
	_, err := pool.Exec(t.Context(), fmt.Sprintf(`CREATE SCHEMA %[1]s; CREATE VIEW %[1]s.outbox_events AS SELECT 1 AS id`, pgx.Identifier{schema}.Sanitize()))
	require.NoError(t, err)
	res := outboxCmd(t, schema, "migrate")
	requireFail(t, res, 1, fmt.Sprintf("outbox: migrate schema %q: ", schema))
	require.NotContains(t, res.stderr, "outboxmigrate:")
}

func TestMigrateUnreachableDatabase(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "--database-url", "postgres://postgres@127.0.0.1:1/test?connect_timeout=5", "migrate")
	requireFail(t, res, 1, "connect to database:", "connection refused")
}

func TestLostOutputFails(t *testing.T) {
	t.Parallel()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer full.Close()
	cmd := exec.Command(binary, "migrate", "--print")
	cmd.Env = environ()
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = full, &stderr
	err = cmd.Run()
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr)
	require.Equal(t, 1, exitErr.ExitCode())
	require.Equal(t, "outbox: write output: write /dev/stdout: no space left on device\n", stderr.String())
}

// On MySQL/MariaDB the key-sequence trigger comes only with --ordering
// aggregate; a wrong value is a usage error.
func TestMigrateOrdering(t *testing.T) {
	t.Parallel()
	mysql := "mysql://root@127.0.0.1:3306/test"
	plain := run(t, nil, "--database-url", mysql, "migrate", "--print")
	requireOK(t, plain)
	require.NotContains(t, plain.stdout, "CREATE TRIGGER")
	ordered := run(t, nil, "--database-url", mysql, "migrate", "--print", "--ordering", "aggregate")
	requireOK(t, ordered)
	require.Contains(t, ordered.stdout, "-- ordered delivery (outbox migrate --ordering aggregate)\n")
	require.Contains(t, ordered.stdout, "DELIMITER //\nCREATE TRIGGER `outbox_events_key_seq`")
	pg := run(t, nil, "migrate", "--print", "--ordering", "aggregate")
	requireOK(t, pg)
	require.NotContains(t, pg.stdout, "ordered delivery", "nothing more on PostgreSQL")

	res := run(t, nil, "migrate", "--ordering", "key")
	requireFail(t, res, 2, `invalid --ordering "key": use aggregate or none`)
	require.Empty(t, res.stdout)
}
