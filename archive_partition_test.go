package outbox_test

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/outboxtest"
)

func TestRelayKeepsArchivePartitions(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	res, err := outboxmigrate.Migrate(b.ctx, b.db, outboxmigrate.Config{Schema: b.schema, PartitionArchive: outboxmigrate.PeriodDaily})
	require.NoError(t, err)
	require.True(t, res.Archive.Converted)
	period, parts, err := b.mgr.ArchivePartitions(b.ctx)
	require.NoError(t, err)
	require.Equal(t, "daily", period)
	// As on a day after the conversion: the (empty) old table's partition
	// is gone, and today has no partition until maintenance makes one.
	_, err = b.pool.Exec(b.ctx, `DROP TABLE `+pgx.Identifier{b.schema, parts[0].Name}.Sanitize())
	require.NoError(t, err)

	b.write(t, 4, nil)
	rec := outboxtest.NewRecorder()
	b.start(t, outbox.RelayConfig{Sink: rec, Retention: outbox.RetainArchive})
	rec.WaitLen(t, 4, 10*time.Second)

	// The relay's maintenance pass at start made today's partition (by the
	// database clock), and the archived events are in it, whether they
	// were inserted before the pass (and moved) or after.
	var today time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT date_trunc('day', now() AT TIME ZONE 'UTC')`).Scan(&today))
	want := "outbox_events_archive_" + today.Format("20060102")
	archive := pgx.Identifier{b.schema, "outbox_events_archive"}.Sanitize()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var inToday, all int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FILTER (WHERE tableoid = to_regclass($1)), count(*) FROM `+archive,
			pgx.Identifier{b.schema, want}.Sanitize()).Scan(&inToday, &all))
		if inToday == 4 && all == 4 {
			break
		}
		require.True(t, time.Now().Before(deadline), "archived events in %s: %d of %d", want, inToday, all)
		time.Sleep(20 * time.Millisecond)
	}

	// Running maintenance again finds nothing to do.
	m, err := b.mgr.MaintainArchive(b.ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.ArchiveMaintenance{Period: "daily"}, m)

	// Nothing is old enough to purge; with a zero-width window everything
	// archived so far is removed, row by row from today's partition.
	n, err := b.mgr.Purge(b.ctx, outbox.PurgeParams{OlderThan: time.Hour}, nil)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = b.mgr.Purge(b.ctx, outbox.PurgeParams{OlderThan: time.Millisecond}, nil)
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
}

func TestArchivePartitionsArePostgresOnly(t *testing.T) {
	t.Parallel()
	m := outbox.NewManager(outbox.SQLite(&sql.DB{}), outbox.ManagerConfig{})
	_, err := m.MaintainArchive(t.Context())
	require.True(t, errors.Is(err, errors.ErrUnsupported), "%v", err)
	require.ErrorContains(t, err, "PostgreSQL only")
	_, _, err = m.ArchivePartitions(t.Context())
	require.ErrorIs(t, err, errors.ErrUnsupported)
}

// Purge on a partitioned archive drops the partitions wholly before the
// cutoff, then deletes the old rows of the one that straddles it, with one
// running count across both.
func TestPurgeDropsArchivePartitions(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	_, err := outboxmigrate.Migrate(b.ctx, b.db, outboxmigrate.Config{Schema: b.schema, PartitionArchive: outboxmigrate.PeriodDaily})
	require.NoError(t, err)
	_, parts, err := b.mgr.ArchivePartitions(b.ctx)
	require.NoError(t, err)
	ident := func(name string) string { return pgx.Identifier{b.schema, name}.Sanitize() }
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := b.pool.Exec(b.ctx, sql, args...)
		require.NoError(t, err)
	}
	// Days as maintenance would have made them: today's, and one for each
	// of the three days before.
	exec(`DROP TABLE ` + ident(parts[0].Name))
	_, err = b.mgr.MaintainArchive(b.ctx)
	require.NoError(t, err)
	var today, now time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', now()`).Scan(&today, &now))
	for i := 1; i <= 3; i++ {
		lo := today.AddDate(0, 0, -i)
		exec(`CREATE TABLE ` + ident("outbox_events_archive_"+lo.UTC().Format("20060102")) + ` PARTITION OF ` + ident("outbox_events_archive") +
			` FOR VALUES FROM ('` + lo.Format(time.RFC3339) + `') TO ('` + lo.AddDate(0, 0, 1).Format(time.RFC3339) + `')`)
		for _, hour := range []int{6, 18} {
			exec(`INSERT INTO `+ident("outbox_events_archive")+` (id, event_type, payload, status, processed_at)
VALUES (nextval($1), 'e', '{}', 'processed', $2)`, ident("outbox_events_id_seq"), lo.Add(time.Duration(hour)*time.Hour))
		}
	}

	// Cut at noon two days ago: three days ago goes whole (2 rows), two
	// days ago loses its 06:00 row, yesterday stays.
	cutoff := today.AddDate(0, 0, -2).Add(12 * time.Hour)
	var progress []int64
	n, err := b.mgr.Purge(b.ctx, outbox.PurgeParams{OlderThan: now.Sub(cutoff), BatchSize: 1},
		func(done int64) { progress = append(progress, done) })
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	require.Equal(t, []int64{2, 3}, progress)
	_, after, err := b.mgr.ArchivePartitions(b.ctx)
	require.NoError(t, err)
	for _, p := range after {
		require.NotEqual(t, "outbox_events_archive_"+today.AddDate(0, 0, -3).UTC().Format("20060102"), p.Name, "dropped")
	}
	var left int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+ident("outbox_events_archive")).Scan(&left))
	require.Equal(t, 3, left)
}
