package pgdriver_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestMeasurePurgeArchive compares purging archived rows by DELETE (a plain
// archive) with dropping partitions (a daily-partitioned one): time, dead
// tuples left behind and the archive's size after. It fills two archives
// with OUTBOX_MEASURE_PURGE_ROWS rows, spread evenly over the ten days
// before yesterday, and purges all but the newest day's, so it is slow and
// runs only when that variable is set:
//
//	OUTBOX_MEASURE_PURGE_ROWS=1000000 go test -run TestMeasurePurgeArchive -v -timeout 30m ./internal/driver/pgdriver/
func TestMeasurePurgeArchive(t *testing.T) {
	rowsEnv := os.Getenv("OUTBOX_MEASURE_PURGE_ROWS")
	if rowsEnv == "" {
		t.Skip("set OUTBOX_MEASURE_PURGE_ROWS to measure")
	}
	total, err := strconv.Atoi(rowsEnv)
	require.NoError(t, err)
	const days = 10

	plain := setup(t)
	parted := setup(t)
	_, parts := parted.partitionDaily(t)
	today := parts[0].From.UTC()
	for i := 2; i <= days+1; i++ {
		lo := today.AddDate(0, 0, -i)
		parted.exec(t, `CREATE TABLE `+pgx.Identifier{parted.schema, "outbox_events_archive_" + lo.Format("20060102")}.Sanitize()+
			` PARTITION OF `+parted.archive()+` FOR VALUES FROM ('`+lo.Format(time.RFC3339)+`') TO ('`+lo.AddDate(0, 0, 1).Format(time.RFC3339)+`')`)
	}

	type reading struct {
		size, dead, live int64
	}
	read := func(b bundle) reading {
		t.Helper()
		// Let the purging sessions flush their statistics.
		time.Sleep(2 * time.Second)
		var r reading
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT
    coalesce(sum(pg_total_relation_size(t.relid)), 0)::bigint,
    coalesce(sum(s.n_dead_tup), 0)::bigint,
    coalesce(sum(s.n_live_tup), 0)::bigint
FROM (SELECT relid FROM pg_partition_tree($1::regclass) UNION SELECT $1::regclass) t
LEFT JOIN pg_stat_user_tables s ON s.relid = t.relid`, b.archive()).Scan(&r.size, &r.dead, &r.live))
		return r
	}

	for _, b := range []bundle{plain, parted} {
		// Rows processed at even intervals from eleven days ago to two days
		// ago, with a payload of about 200 bytes.
		start := time.Now()
		b.exec(t, `INSERT INTO `+b.archive()+` (id, event_type, aggregate_type, aggregate_id, payload, status, locked_by, processed_at)
SELECT g, 'order.created', 'order', g::text,
       jsonb_build_object('order_id', g, 'customer', 'customer-' || (g % 1000), 'note', repeat('x', 120)),
       'processed', 'relay-1',
       date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '11 days'
           + (g - 1) * (interval '`+strconv.Itoa(days)+` days' / $1)
FROM generate_series(1, $1) g`, total)
		b.exec(t, `VACUUM ANALYZE `+b.archive())
		if b.schema == plain.schema {
			// The dead tuples the purge leaves are what vacuum must clean
			// afterwards; keep autovacuum from cleaning them before they
			// are counted, and time that vacuum below.
			b.exec(t, `ALTER TABLE `+b.archive()+` SET (autovacuum_enabled = false)`)
		}
		t.Logf("%s: filled %d rows in %v", b.schema, total, time.Since(start).Round(time.Millisecond))
	}
	beforePlain, beforeParted := read(plain), read(parted)
	// The cutoff is midnight two days ago: nine partitions go whole, the
	// tenth stays, as the newest rows of the plain table stay.
	olderThan := plain.dbNow(t).Sub(today.AddDate(0, 0, -2))
	want := int64(total) * 9 / 10

	start := time.Now()
	deleted := plain.purgeArchiveBatches(t, olderThan)
	deleteTime := time.Since(start)
	// Each batch takes its cutoff from now(): rows that age past it during
	// the purge go too.
	require.GreaterOrEqual(t, deleted, want)

	// What the purge's exact count costs: the same rows counted once
	// beforehand (which also warms the cache for it).
	start = time.Now()
	var counted int64
	require.NoError(t, parted.pool.QueryRow(parted.ctx, `SELECT count(*) FROM `+parted.archive()+` WHERE processed_at < $1`,
		today.AddDate(0, 0, -2)).Scan(&counted))
	countTime := time.Since(start)

	start = time.Now()
	dropped, ok, err := parted.drv.PurgeArchivePartitions(parted.ctx, olderThan, nil)
	require.NoError(t, err)
	require.True(t, ok)
	// As outbox purge does: what aged past the cutoff in the straddling
	// partition goes in batches.
	dropped += parted.purgeArchiveBatches(t, olderThan)
	dropTime := time.Since(start)
	require.GreaterOrEqual(t, dropped, want)

	afterPlain, afterParted := read(plain), read(parted)
	start = time.Now()
	plain.exec(t, `VACUUM `+plain.archive())
	vacuumTime := time.Since(start)
	vacuumed := read(plain)
	mib := func(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB" }
	t.Logf("| archive | rows purged | time | dead tuples after | size before | size after |")
	t.Logf("| plain, DELETE in batches of 1000 | %d | %v | %d | %s | %s |", deleted, deleteTime.Round(time.Millisecond),
		afterPlain.dead, mib(beforePlain.size), mib(afterPlain.size))
	t.Logf("| plain, then VACUUM | | %v | %d | | %s |", vacuumTime.Round(time.Millisecond), vacuumed.dead, mib(vacuumed.size))
	t.Logf("| partitioned daily, %d partitions dropped | %d | %v | %d | %s | %s |", days-1, dropped, dropTime.Round(time.Millisecond),
		afterParted.dead, mib(beforeParted.size), mib(afterParted.size))
	t.Logf("counting the %d rows of those partitions alone: %v", counted, countTime.Round(time.Millisecond))
}

// purgeArchiveBatches deletes archived rows older than olderThan in batches
// of 1000, as outbox purge does, and returns how many went.
func (b bundle) purgeArchiveBatches(t *testing.T, olderThan time.Duration) int64 {
	t.Helper()
	var total int64
	for {
		n, err := b.drv.PurgeArchiveBatch(b.ctx, olderThan, 1000)
		require.NoError(t, err)
		total += n
		if n < 1000 {
			return total
		}
	}
}
