package main_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
)

func TestMigratePartitionArchive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	archive := pgx.Identifier{b.schema, "outbox_events_archive"}.Sanitize()
	// Two archived events, processed ten days ago and now.
	b.exec(t, `INSERT INTO `+archive+` (id, event_type, payload, status, processed_at)
VALUES (1, 'e', '{}', 'processed', now() - interval '10 days'), (2, 'e', '{}', 'processed', now())`)
	latest := pgdriver.Migrations()[len(pgdriver.Migrations())-1].Version

	res := outboxCmd(t, b.schema, "migrate", "--partition-archive", "daily")
	requireOK(t, res)
	require.Equal(t, fmt.Sprintf("schema is up to date at version %d\n", latest)+
		"partitioned outbox_events_archive daily by processed_at, keeping its rows\n", res.stdout)

	res = outboxCmd(t, b.schema, "migrate", "--partition-archive", "daily")
	requireOK(t, res)
	require.Equal(t, fmt.Sprintf("schema is up to date at version %d\n", latest)+
		"outbox_events_archive is already partitioned daily\n", res.stdout)

	res = outboxCmd(t, b.schema, "migrate", "--partition-archive", "weekly")
	requireFail(t, res, 2, "invalid --partition-archive:", "is already partitioned daily, not weekly", "cannot be changed")

	var kind string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT relkind::text FROM pg_class WHERE oid = $1::regclass`, archive).Scan(&kind))
	require.Equal(t, "p", kind)

	// Purge deletes the old row from the partition that holds both.
	res = outboxCmd(t, b.schema, "purge", "--older-than", "7d")
	requireOK(t, res)
	require.Equal(t, "purged 1 processed events older than 7d\n", res.stdout)
	var left []int64
	rows, err := b.pool.Query(b.ctx, `SELECT id FROM `+archive)
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{2}, left)
}

func TestMigratePrintPartitionArchive(t *testing.T) {
	t.Parallel()
	pool := testutil.Pool(t)
	schema := testutil.EmptySchemaName(t)
	res := run(t, nil, "migrate", "--print", "--schema", schema, "--partition-archive", "weekly")
	requireOK(t, res)
	require.Contains(t, res.stdout, "-- archive partitioning, outbox migrate --partition-archive weekly\nDO $outbox$")

	// The script applies on an empty schema; its partitioning part applies
	// again without effect.
	_, err := pool.Exec(t.Context(), res.stdout)
	require.NoError(t, err)
	at := strings.Index(res.stdout, "\n-- archive partitioning")
	require.Positive(t, at)
	_, err = pool.Exec(t.Context(), res.stdout[at:])
	require.NoError(t, err)
	var partitions int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_inherits WHERE inhparent = $1::regclass`,
		pgx.Identifier{schema, "outbox_events_archive"}.Sanitize()).Scan(&partitions))
	require.Equal(t, 1+4+1, partitions, "the old table, four weeks, the default")
}

func TestMigratePartitionArchiveBadInput(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite://" + filepath.Join(t.TempDir(), "app.db")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown period", []string{"migrate", "--partition-archive", "monthly"}, `invalid --partition-archive "monthly": use daily or weekly`},
		{"unknown period printed", []string{"migrate", "--print", "--partition-archive", "Daily"}, `invalid --partition-archive "Daily": use daily or weekly`},
		{"sqlite", []string{"--database-url", sqlite, "migrate", "--partition-archive", "daily"}, "archive partitioning is PostgreSQL only"},
		{"mysql printed", []string{"--database-url", "mysql://root@127.0.0.1:3306/test", "migrate", "--print", "--partition-archive", "weekly"}, "archive partitioning is PostgreSQL only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, nil, tt.args...)
			requireFail(t, res, 2, tt.want)
			require.Empty(t, res.stdout)
		})
	}
}
