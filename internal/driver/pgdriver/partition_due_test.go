package pgdriver_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
)

// backToMigration11 puts the schema's partition index back as migration 8
// made it, takes out what migration 13 added, and forgets both.
func backToMigration11(t *testing.T, b bundle) {
	t.Helper()
	idx := pgx.Identifier{b.schema, "outbox_events_partition_idx"}.Sanitize()
	_, err := b.pool.Exec(b.ctx, `DROP INDEX `+idx+`;
CREATE INDEX outbox_events_partition_idx ON `+b.drv.Table()+` (
    (hashtext(coalesce(aggregate_type, '') || ':' || coalesce(aggregate_id, id::text)) & 255), txid, id)
    WHERE status = 'pending';
ALTER TABLE `+pgx.Identifier{b.schema, "outbox_relays"}.Sanitize()+` DROP COLUMN ordering, DROP COLUMN ordered_failure, DROP COLUMN leases;
DELETE FROM `+pgx.Identifier{b.schema, "outbox_migrations"}.Sanitize()+` WHERE version IN (12, 13)`)
	require.NoError(t, err)
}

// indexOID returns the OID of the schema's index name, and whether its
// last column is available_at.
func indexOID(t *testing.T, b bundle, name string) (oid uint32, due bool) {
	t.Helper()
	err := b.pool.QueryRow(b.ctx, `SELECT i.indexrelid::oid, pg_get_indexdef(i.indexrelid) LIKE '%, available_at) WHERE%'
		FROM pg_index i WHERE i.indexrelid = to_regclass($1)`, pgx.Identifier{b.schema, name}.Sanitize()).Scan(&oid, &due)
	require.NoError(t, err)
	return oid, due
}

// reader returns an open transaction that has read the outbox table (and so
// holds its lock), rolled back when the test ends.
func reader(t *testing.T, b bundle) pgx.Tx {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) })
	var n int
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT count(*) FROM `+b.drv.Table()).Scan(&n))
	return tx
}

// Migration 12 keeps a valid index that an operator built beforehand
// without blocking (CREATE INDEX CONCURRENTLY) and only swaps it in; it
// builds one when there is none, or only an invalid leftover.
func TestMigration12KeepsAnIndexBuiltBeforehand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	backToMigration11(t, b)
	_, err := b.pool.Exec(b.ctx, `CREATE INDEX CONCURRENTLY outbox_events_partition_due_idx ON `+b.drv.Table()+` (
    (hashtext(coalesce(aggregate_type, '') || ':' || coalesce(aggregate_id, id::text)) & 255), txid, id, available_at)
    WHERE status = 'pending'`)
	require.NoError(t, err)
	built, due := indexOID(t, b, "outbox_events_partition_due_idx")
	require.True(t, due)
	applied, err := pgdriver.Migrate(b.ctx, b.pool, b.schema)
	require.NoError(t, err)
	require.Len(t, applied, 2, "12 and 13 again")
	require.Equal(t, 12, applied[0].Version)
	oid, due := indexOID(t, b, "outbox_events_partition_idx")
	require.Equal(t, built, oid, "the index built beforehand is the one in place")
	require.True(t, due)

	backToMigration11(t, b)
	_, err = pgdriver.Migrate(b.ctx, b.pool, b.schema)
	require.NoError(t, err)
	_, due = indexOID(t, b, "outbox_events_partition_idx")
	require.True(t, due, "built by the migration")

	// A concurrent build that failed leaves an invalid index behind.
	backToMigration11(t, b)
	_, err = b.pool.Exec(b.ctx, `CREATE INDEX outbox_events_partition_due_idx ON `+b.drv.Table()+` (id, available_at)
    WHERE status = 'pending'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass($1)`,
		pgx.Identifier{b.schema, "outbox_events_partition_due_idx"}.Sanitize())
	require.NoError(t, err)
	invalid, _ := indexOID(t, b, "outbox_events_partition_due_idx")
	_, err = pgdriver.Migrate(b.ctx, b.pool, b.schema)
	require.NoError(t, err)
	oid, due = indexOID(t, b, "outbox_events_partition_idx")
	require.NotEqual(t, invalid, oid, "the invalid leftover is rebuilt")
	require.True(t, due)
}

// Migration 12 takes the table's strongest lock before it builds, so a
// transaction that read the table and writes it while the migration waits
// goes through, and the migration after it: taking that lock only for the
// drop, after the build held writers back, deadlocked them.
func TestMigration12WaitsForAReaderThatWrites(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertKeyed(t, "a", "b")
	backToMigration11(t, b)
	tx := reader(t, b)

	done := make(chan error, 1)
	go func() {
		_, err := pgdriver.Migrate(b.ctx, b.pool, b.schema)
		done <- err
	}()
	testutil.WaitFor(t, 10*time.Second, "the migration waits for the reader's lock", func() bool {
		var waiting bool
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT EXISTS (SELECT FROM pg_locks l
			WHERE l.relation = to_regclass($1) AND NOT l.granted)`, b.drv.Table()).Scan(&waiting))
		return waiting
	})
	_, err := tx.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (event_type, payload) VALUES ('e', '{}')`)
	require.NoError(t, err, "the reader writes")
	require.NoError(t, tx.Commit(b.ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the migration did not finish")
	}
	_, due := indexOID(t, b, "outbox_events_partition_idx")
	require.True(t, due)
}

// A transaction that holds the table past migration 12's lock timeout fails
// the migration with one line saying what to do, and leaves the schema as
// it was.
func TestMigration12GivesUpOnALongTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	backToMigration11(t, b)
	reader(t, b)
	_, err := pgdriver.Migrate(b.ctx, b.pool, b.schema)
	require.ErrorContains(t, err, "migration 012_partition_due: ")
	require.ErrorContains(t, err, "run outbox migrate again once it ended")
	v, err := pgdriver.Version(b.ctx, b.pool, b.schema)
	require.NoError(t, err)
	require.Equal(t, 11, v)
	_, due := indexOID(t, b, "outbox_events_partition_idx")
	require.False(t, due, "the index is as it was")
}
