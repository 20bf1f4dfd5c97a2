package pgdriver_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
)

func (b bundle) archive() string {
	return pgx.Identifier{b.schema, "outbox_events_archive"}.Sanitize()
}

func (b bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, sql, args...)
	require.NoError(t, err)
}

// archiveRows inserts one archived row per age, processed that long ago.
func (b bundle) archiveRows(t *testing.T, ages ...time.Duration) {
	t.Helper()
	for _, age := range ages {
		b.exec(t, `INSERT INTO `+b.archive()+` (id, event_type, payload, status, processed_at)
VALUES (nextval($1), 'e', '{}', 'processed', now() - $2::bigint * interval '1 millisecond')`,
			pgx.Identifier{b.schema, "outbox_events_id_seq"}.Sanitize(), age.Milliseconds())
	}
}

// rowsByPartition counts archived rows per partition.
func (b bundle) rowsByPartition(t *testing.T) map[string]int {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT c.relname, count(*) FROM `+b.archive()+` a JOIN pg_class c ON c.oid = a.tableoid GROUP BY 1`)
	require.NoError(t, err)
	out := map[string]int{}
	var (
		name string
		n    int
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error { out[name] = n; return nil })
	require.NoError(t, err)
	return out
}

func (b bundle) dbNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT now()`).Scan(&now))
	return now.UTC()
}

func day(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

func TestMigratePartitionedKeepsRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.archiveRows(t, 10*24*time.Hour, 3*24*time.Hour, time.Minute)

	applied, res, err := b.drv.MigratePartitioned(b.ctx, driver.PeriodDaily)
	require.NoError(t, err)
	require.Empty(t, applied, "the schema was current")
	require.True(t, res.Converted)
	require.Equal(t, driver.PeriodDaily, res.Period)
	require.Empty(t, res.Created, "the conversion made every partition maintenance would")

	// The old table holds everything before tomorrow; a week of days
	// follows it, then the default partition.
	tomorrow := day(b.dbNow(t)).AddDate(0, 0, 1)
	period, parts, err := b.drv.ArchivePartitions(b.ctx)
	require.NoError(t, err)
	require.Equal(t, driver.PeriodDaily, period)
	require.Len(t, parts, 1+7+1)
	legacy := "outbox_events_archive_before_" + tomorrow.Format("20060102")
	require.Equal(t, driver.ArchivePartition{Name: legacy, To: tomorrow}, normalize(parts[0]))
	for i, p := range parts[1:8] {
		lo := tomorrow.AddDate(0, 0, i)
		require.Equal(t, driver.ArchivePartition{Name: "outbox_events_archive_" + lo.Format("20060102"), From: lo, To: lo.AddDate(0, 0, 1)}, normalize(p))
	}
	require.Equal(t, driver.ArchivePartition{Name: "outbox_events_archive_default", Default: true}, parts[8])
	require.Equal(t, map[string]int{legacy: 3}, b.rowsByPartition(t))

	// Rerunning is a no-op; another period is refused.
	_, res, err = b.drv.MigratePartitioned(b.ctx, driver.PeriodDaily)
	require.NoError(t, err)
	require.False(t, res.Converted)
	require.Empty(t, res.Created)
	_, _, err = b.drv.MigratePartitioned(b.ctx, driver.PeriodWeekly)
	require.ErrorIs(t, err, driver.ErrPeriodChange)
	require.ErrorContains(t, err, "is already partitioned daily, not weekly")
	_, again, err := b.drv.ArchivePartitions(b.ctx)
	require.NoError(t, err)
	require.Len(t, again, len(parts))

	// A row without processed_at cannot be placed: the conversion says how
	// to fix it and changes nothing.
	other := setup(t)
	other.exec(t, `INSERT INTO `+other.archive()+` (id, event_type, payload) VALUES (1, 'e', '{}')`)
	_, _, err = other.drv.MigratePartitioned(other.ctx, driver.PeriodWeekly)
	require.ErrorContains(t, err, "rows without processed_at")
	_, parts, err = other.drv.ArchivePartitions(other.ctx)
	require.NoError(t, err)
	require.Empty(t, parts)
}

// normalize puts a partition's bounds in UTC for comparison.
func normalize(p driver.ArchivePartition) driver.ArchivePartition {
	if !p.From.IsZero() {
		p.From = p.From.UTC()
	}
	if !p.To.IsZero() {
		p.To = p.To.UTC()
	}
	return p
}

func TestPartitionSQLAppliesOnFreshSchema(t *testing.T) {
	t.Parallel()
	pool := testutil.Pool(t)
	// A name that needs quoting as an identifier, as a literal and in a
	// dollar-quoted body.
	schema := testutil.SchemaName(t) + `_'$outbox$" x`
	t.Cleanup(func() { testutil.DropSchema(t, pool, schema) })
	b := bundle{ctx: t.Context(), pool: pool, schema: schema, drv: pgdriver.New(pool, schema)}
	script := pgdriver.MigrationSQL(schema) + pgdriver.PartitionSQL(schema, driver.PeriodWeekly)
	b.exec(t, script)

	period, parts, err := b.drv.ArchivePartitions(b.ctx)
	require.NoError(t, err)
	require.Equal(t, driver.PeriodWeekly, period)
	require.Len(t, parts, 1+4+1)
	now := b.dbNow(t)
	monday := day(now).AddDate(0, 0, -((int(now.Weekday()) + 6) % 7))
	require.Equal(t, monday.AddDate(0, 0, 7), parts[0].To.UTC(), "the old table takes the rest of this week")
	require.Equal(t, monday.AddDate(0, 0, 35), parts[4].To.UTC())

	// Applied twice, the script changes nothing; with another period it
	// fails.
	b.exec(t, pgdriver.PartitionSQL(schema, driver.PeriodWeekly))
	_, err = b.pool.Exec(b.ctx, pgdriver.PartitionSQL(schema, driver.PeriodDaily))
	require.ErrorContains(t, err, "already partitioned weekly, not daily")
}

func TestMaintainArchive(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// A plain archive: nothing to do.
	res, err := b.drv.MaintainArchive(b.ctx)
	require.NoError(t, err)
	require.Equal(t, driver.PartitionResult{}, res)

	_, _, err = b.drv.MigratePartitioned(b.ctx, driver.PeriodDaily)
	require.NoError(t, err)
	_, parts, err := b.drv.ArchivePartitions(b.ctx)
	require.NoError(t, err)
	// Drop the old table's partition and the last two days, and put a row
	// for one of them in the default partition.
	for _, p := range []driver.ArchivePartition{parts[0], parts[6], parts[7]} {
		b.exec(t, `DROP TABLE `+pgx.Identifier{b.schema, p.Name}.Sanitize())
	}
	b.exec(t, `INSERT INTO `+b.archive()+` (id, event_type, payload, status, processed_at) VALUES (1, 'e', '{}', 'processed', $1)`,
		parts[7].From.Add(time.Hour))
	require.Equal(t, map[string]int{"outbox_events_archive_default": 1}, b.rowsByPartition(t))

	// Two callers at once: one creates today's and the two missing days'
	// partitions, the other waits for it and finds nothing to do.
	var (
		wg      sync.WaitGroup
		results [2]driver.PartitionResult
		errs    [2]error
	)
	for i := range results {
		wg.Go(func() { results[i], errs[i] = b.drv.MaintainArchive(b.ctx) })
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	created := slices.Concat(results[0].Created, results[1].Created)
	today := day(b.dbNow(t))
	require.Equal(t, []string{
		"outbox_events_archive_" + today.Format("20060102"),
		parts[6].Name,
		parts[7].Name,
	}, created)
	require.EqualValues(t, 1, results[0].Moved+results[1].Moved)
	require.Equal(t, map[string]int{parts[7].Name: 1}, b.rowsByPartition(t))

	_, after, err := b.drv.ArchivePartitions(b.ctx)
	require.NoError(t, err)
	require.Len(t, after, 1+7+1) // today, the week after, the default
	require.Equal(t, today, after[0].From.UTC())

	res, err = b.drv.MaintainArchive(b.ctx)
	require.NoError(t, err)
	require.Empty(t, res.Created)

	// A changed comment leaves maintenance unable to tell the period.
	b.exec(t, `COMMENT ON TABLE `+b.archive()+` IS 'mine'`)
	_, err = b.drv.MaintainArchive(b.ctx)
	require.ErrorContains(t, err, "cannot tell the partition period")
}

func TestPurgeArchivePartitions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	n, ok, err := b.drv.PurgeArchivePartitions(b.ctx, time.Hour, nil)
	require.NoError(t, err)
	require.False(t, ok, "a plain archive is purged row by row")
	require.Zero(t, n)

	// Days as maintenance would have made them over the past ten days:
	// replace the (empty) partition of the old table with one per day.
	_, parts := b.partitionDaily(t)
	today := parts[0].From.UTC()
	for i := 1; i <= 10; i++ {
		lo := today.AddDate(0, 0, -i)
		b.exec(t, `CREATE TABLE `+pgx.Identifier{b.schema, "outbox_events_archive_" + lo.Format("20060102")}.Sanitize()+
			` PARTITION OF `+b.archive()+` FOR VALUES FROM ('`+lo.Format(time.RFC3339)+`') TO ('`+lo.AddDate(0, 0, 1).Format(time.RFC3339)+`')`)
	}
	now := b.dbNow(t)
	sinceMidnight := now.Sub(today)
	// Two rows on each of the past ten days at 06:00 and 18:00, and two
	// today.
	var ages []time.Duration
	for i := 1; i <= 10; i++ {
		ages = append(ages, sinceMidnight+time.Duration(i)*24*time.Hour-6*time.Hour, sinceMidnight+time.Duration(i)*24*time.Hour-18*time.Hour)
	}
	ages = append(ages, 0, 0)
	b.archiveRows(t, ages...)
	require.Len(t, b.rowsByPartition(t), 11)

	// Cut at noon five days ago: days 6-10 go whole; day 5's 06:00 row is
	// left to the batched purge, which reads only the partitions left
	// before the cutoff.
	cutoff := today.AddDate(0, 0, -5).Add(12 * time.Hour)
	var progress []int64
	n, ok, err = b.drv.PurgeArchivePartitions(b.ctx, now.Sub(cutoff), func(done int64) { progress = append(progress, done) })
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 10, n)
	require.Equal(t, []int64{2, 4, 6, 8, 10}, progress)
	require.Len(t, b.rowsByPartition(t), 6)
	_, after, err := b.drv.ArchivePartitions(b.ctx)
	require.NoError(t, err)
	require.Equal(t, today.AddDate(0, 0, -5), after[0].From.UTC(), "the dropped partitions are gone")

	olderThan := b.dbNow(t).Sub(cutoff)
	var plan string
	require.NoError(t, b.pool.QueryRow(b.ctx, `EXPLAIN (FORMAT JSON) `+pgdriver.PurgeArchiveSQL(b.drv), olderThan.Milliseconds(), 10).Scan(&plan))
	// Only day 5's partition and the default one are read, by the batch's
	// select and by the delete; the rest are pruned when it starts.
	require.Equal(t, 2, strings.Count(plan, fmt.Sprintf(`"Subplans Removed": %d`, len(after)-2)), plan)
	n, err = b.drv.PurgeArchiveBatch(b.ctx, olderThan, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	left := b.rowsByPartition(t)
	require.Len(t, left, 6)
	require.Equal(t, 1, left["outbox_events_archive_"+today.AddDate(0, 0, -5).Format("20060102")])
	var rows int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+b.archive()).Scan(&rows))
	require.Equal(t, 22-11, rows)
}

// partitionDaily partitions the archive daily and drops the partition of the
// (empty) old table, so that maintenance creates today's; it returns the
// period and the partitions.
func (b bundle) partitionDaily(t *testing.T) (string, []driver.ArchivePartition) {
	t.Helper()
	_, _, err := b.drv.MigratePartitioned(b.ctx, driver.PeriodDaily)
	require.NoError(t, err)
	_, parts, err := b.drv.ArchivePartitions(b.ctx)
	require.NoError(t, err)
	b.exec(t, `DROP TABLE `+pgx.Identifier{b.schema, parts[0].Name}.Sanitize())
	_, err = b.drv.MaintainArchive(b.ctx)
	require.NoError(t, err)
	period, parts, err := b.drv.ArchivePartitions(b.ctx)
	require.NoError(t, err)
	return period, parts
}

func TestRelayArchivesIntoPartitions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, parts := b.partitionDaily(t)
	ids := b.insert(t, 5)
	c := b.claim(t, "r1", 5, time.Minute)
	n, err := b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "r1", LockedUntil: c.LockedUntil}, ids, driver.RetainArchive)
	require.NoError(t, err)
	require.EqualValues(t, 5, n)
	// processed_at is the database clock's today.
	require.Equal(t, map[string]int{parts[0].Name: 5}, b.rowsByPartition(t))
}
