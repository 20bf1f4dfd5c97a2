package pgdriver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outbox/internal/driver"
)

// Archive partitioning: outbox_events_archive becomes a table partitioned by
// range of processed_at, one partition per UTC day or ISO week, so retention
// drops whole partitions instead of deleting rows. The hot table stays a
// plain table: its unique idempotency index and the writer's ON CONFLICT
// need one.
//
// The period is recorded in the archive's table comment
// ("outbox archive partitions: daily …"), where maintenance reads it.
// Partitions are named outbox_events_archive_YYYYMMDD after the first day
// they hold; outbox_events_archive_before_YYYYMMDD is the archive as it was
// before partitioning (everything before that day), and
// outbox_events_archive_default catches rows no other partition takes, so an
// insert never fails.

const (
	archiveName      = "outbox_events_archive"
	defaultPartition = archiveName + "_default"
	// periodComment starts the archive's comment; the period follows.
	periodComment = "outbox archive partitions: "
	// partitionLockKey is the advisory lock under which partitions are
	// created, shared by the conversion and maintenance.
	partitionLockKey = "outbox_archive_partitions"
	// maintainLockTimeout bounds every lock wait of a maintenance pass: a
	// pass that cannot get its locks gives up and runs again later.
	maintainLockTimeout = "2s"
	// dropLockTimeout bounds the wait for the archive's exclusive lock when
	// a purge detaches a partition: the relays' archive inserts queue behind
	// it, so it must be short. A purge retries up to dropAttempts times.
	dropLockTimeout = "500ms"
	dropAttempts    = 20
)

// partitionsAhead is how many periods after the current one have a
// partition: a week of days, a month of weeks. Maintenance runs every few
// minutes, so inserts land in the default partition only when it has not
// run for that long.
func partitionsAhead(period string) int {
	if period == driver.PeriodWeekly {
		return 4
	}
	return 7
}

// validPeriod reports whether period is one the driver knows.
func validPeriod(period string) bool {
	return period == driver.PeriodDaily || period == driver.PeriodWeekly
}

// periodStart returns the start (UTC) of the period holding t.
func periodStart(period string, t time.Time) time.Time {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	if period == driver.PeriodWeekly {
		// ISO weeks start on Monday, as date_trunc('week', …) does.
		return day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
	}
	return day
}

// addPeriods moves a period start n periods on.
func addPeriods(period string, start time.Time, n int) time.Time {
	if period == driver.PeriodWeekly {
		return start.AddDate(0, 0, 7*n)
	}
	return start.AddDate(0, 0, n)
}

// timestampLiteral renders t for DDL, which cannot take parameters.
func timestampLiteral(t time.Time) string {
	return "'" + t.UTC().Format("2006-01-02 15:04:05") + "+00'"
}

// PartitionSQL returns the script that turns schema's plain archive into a
// partitioned one. It runs as one DO block, so the boundaries come from the
// database clock when it is applied, not when it was printed; it does
// nothing when the archive already has this period and fails when it has
// another.
func PartitionSQL(schema, period string) string {
	if !validPeriod(period) {
		panic("pgdriver: unknown partition period " + period)
	}
	body := partitionBody
	for k, v := range map[string]string{
		"{{schema_literal}}": quoteLiteral(schema),
		"{{period}}":         period,
		"{{unit}}":           map[string]string{driver.PeriodDaily: "day", driver.PeriodWeekly: "week"}[period],
		"{{step}}":           map[string]string{driver.PeriodDaily: "1 day", driver.PeriodWeekly: "7 days"}[period],
		"{{ahead}}":          strconv.Itoa(partitionsAhead(period)),
		"{{comment}}":        quoteLiteral(periodComment + period + " by processed_at (UTC); partitions are created by outbox maintenance"),
		"{{lock_key}}":       quoteLiteral(partitionLockKey),
	} {
		body = strings.ReplaceAll(body, k, v)
	}
	tag := dollarTag(body)
	return "DO " + tag + body + tag + ";\n"
}

// partitionBody converts the archive. Arithmetic on period boundaries is
// done on timestamps in UTC, never on timestamptz, so that a session time
// zone with daylight saving time cannot shift a boundary.
const partitionBody = `
DECLARE
    sch      text := {{schema_literal}};
    archive  regclass;
    current  text;
    newest   timestamptz;
    boundary timestamp; -- UTC
    lo       timestamp; -- UTC
    legacy   text;
    nulls    boolean;
    pk       name;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext({{lock_key}}), hashtext(sch));
    archive := to_regclass(format('%I.%I', sch, 'outbox_events_archive'));
    IF archive IS NULL THEN
        RAISE EXCEPTION 'outbox: %.outbox_events_archive does not exist: run outbox migrate first', quote_ident(sch);
    END IF;
    IF (SELECT relkind FROM pg_class WHERE oid = archive) = 'p' THEN
        current := substring(obj_description(archive, 'pg_class') FROM '^outbox archive partitions: (\w+)');
        IF current IS DISTINCT FROM '{{period}}' THEN
            RAISE EXCEPTION 'outbox: %.outbox_events_archive is already partitioned %, not {{period}}; switching is not supported',
                quote_ident(sch), coalesce(current, '(unknown period)');
        END IF;
        RETURN;
    END IF;

    -- A partition key cannot be NULL; relays always set processed_at.
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.outbox_events_archive WHERE processed_at IS NULL)', sch) INTO nulls;
    IF nulls THEN
        RAISE EXCEPTION 'outbox: %.outbox_events_archive has rows without processed_at: set it (UPDATE … SET processed_at = updated_at WHERE processed_at IS NULL) and migrate again', quote_ident(sch);
    END IF;

    -- The old table becomes the partition for everything before the next
    -- period, so it holds every row it has now (max() reads the
    -- processed_at index) and the rest of the current period.
    EXECUTE format('SELECT max(processed_at) FROM %I.outbox_events_archive', sch) INTO newest;
    boundary := date_trunc('{{unit}}', greatest(now(), newest) AT TIME ZONE 'UTC') + interval '{{step}}';
    legacy := 'outbox_events_archive_before_' || to_char(boundary, 'YYYYMMDD');
    -- A partition has the archive's primary key, (id, processed_at), and no
    -- other; ATTACH builds it.
    SELECT conname INTO pk FROM pg_constraint WHERE conrelid = archive AND contype = 'p';
    IF pk IS NOT NULL THEN
        EXECUTE format('ALTER TABLE %I.outbox_events_archive DROP CONSTRAINT %I', sch, pk);
    END IF;
    EXECUTE format('ALTER TABLE %I.outbox_events_archive RENAME TO %I', sch, legacy);
    EXECUTE format('ALTER INDEX IF EXISTS %I.outbox_events_archive_processed_at_idx RENAME TO %I', sch, legacy || '_processed_at_idx');

    EXECUTE format('CREATE TABLE %I.outbox_events_archive (
        LIKE %I.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
        PRIMARY KEY (id, processed_at)
    ) PARTITION BY RANGE (processed_at)', sch, sch, legacy);
    EXECUTE format('CREATE INDEX outbox_events_archive_processed_at_idx ON %I.outbox_events_archive (processed_at)', sch);

    -- A valid CHECK that implies the partition bound lets SET NOT NULL and
    -- ATTACH skip their scans; validating it is the one scan of the table.
    -- ATTACH reuses the processed_at index and builds the (id, processed_at)
    -- one.
    EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT outbox_partition_bound CHECK (processed_at IS NOT NULL AND processed_at < %L)',
        sch, legacy, boundary AT TIME ZONE 'UTC');
    EXECUTE format('ALTER TABLE %I.%I ALTER COLUMN processed_at SET NOT NULL', sch, legacy);
    EXECUTE format('ALTER TABLE %I.outbox_events_archive ATTACH PARTITION %I.%I FOR VALUES FROM (MINVALUE) TO (%L)',
        sch, sch, legacy, boundary AT TIME ZONE 'UTC');
    EXECUTE format('ALTER TABLE %I.%I DROP CONSTRAINT outbox_partition_bound', sch, legacy);

    EXECUTE format('CREATE TABLE %I.outbox_events_archive_default PARTITION OF %I.outbox_events_archive DEFAULT', sch, sch);
    FOR i IN 0 .. {{ahead}} - 1 LOOP
        lo := boundary + i * interval '{{step}}';
        EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.outbox_events_archive FOR VALUES FROM (%L) TO (%L)',
            sch, 'outbox_events_archive_' || to_char(lo, 'YYYYMMDD'), sch,
            lo AT TIME ZONE 'UTC', (lo + interval '{{step}}') AT TIME ZONE 'UTC');
    END LOOP;
    EXECUTE format('COMMENT ON TABLE %I.outbox_events_archive IS %L', sch, {{comment}});
END
`

// quoteLiteral quotes s as a SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

var _ driver.ArchivePartitioner = (*Driver)(nil)

// PartitionSQL returns the partitioning script for the driver's schema.
func (d *Driver) PartitionSQL(period string) string { return PartitionSQL(d.schema, period) }

// MigratePartitioned applies the missing migrations, partitions the archive
// and creates the partitions ahead, in the migration's transaction.
func (d *Driver) MigratePartitioned(ctx context.Context, period string) ([]driver.Migration, driver.PartitionResult, error) {
	if !validPeriod(period) {
		return nil, driver.PartitionResult{}, fmt.Errorf("unknown archive partition period %q: use daily or weekly", period)
	}
	var res driver.PartitionResult
	applied, err := migrate(ctx, d.pool, d.schema, func(tx pgx.Tx) error {
		res = driver.PartitionResult{}
		st, err := d.archiveState(ctx, tx)
		if err != nil {
			return err
		}
		switch {
		case !st.partitioned:
			if _, err := tx.Exec(ctx, PartitionSQL(d.schema, period)); err != nil {
				return fmt.Errorf("partition %s: %w", d.archive(), err)
			}
			res.Converted = true
		case st.period != period:
			return fmt.Errorf("%s is already partitioned %s, not %s: %w", d.archive(), describePeriod(st.period), period, driver.ErrPeriodChange)
		}
		res.Period = period
		return d.maintain(ctx, tx, &res)
	})
	if err != nil {
		return nil, driver.PartitionResult{}, err
	}
	return infos(applied), res, nil
}

func describePeriod(p string) string {
	if p == "" {
		return "with an unknown period (its table comment was changed)"
	}
	return p
}

// archive is the quoted, schema-qualified archive table.
func (d *Driver) archive() string { return d.ident(archiveName) }

// ident quotes a table of the driver's schema.
func (d *Driver) ident(name string) string { return pgx.Identifier{d.schema, name}.Sanitize() }

// archiveState is what the catalog says about the archive.
type archiveState struct {
	partitioned bool
	period      string // from the comment; empty when unknown
	now         time.Time
	partitions  []driver.ArchivePartition
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// archiveState reads the archive's kind, period and partitions, and the
// database clock.
func (d *Driver) archiveState(ctx context.Context, q querier) (archiveState, error) {
	var (
		st      archiveState
		relkind pgtype.Text
		comment pgtype.Text
	)
	// to_regclass is NULL for a missing archive: no error, no aborted tx.
	err := q.QueryRow(ctx, `SELECT now(), c.relkind::text, obj_description(c.oid, 'pg_class')
FROM (SELECT to_regclass($1) AS oid) r LEFT JOIN pg_class c ON c.oid = r.oid`, d.archive()).Scan(&st.now, &relkind, &comment)
	if err != nil {
		return st, wrap(err)
	}
	if !relkind.Valid {
		return st, fmt.Errorf("%w: %s", driver.ErrNoTable, d.archive())
	}
	if relkind.String != "p" {
		return st, nil
	}
	st.partitioned = true
	if rest, ok := strings.CutPrefix(comment.String, periodComment); ok {
		if p, _, _ := strings.Cut(rest, " "); validPeriod(p) {
			st.period = p
		}
	}
	// The bounds are read back from their text form, which carries the
	// offset, so the session's time zone does not matter.
	rows, err := q.Query(ctx, `SELECT p.relname, b.expr = 'DEFAULT',
    (regexp_match(b.expr, 'FROM \(''([^'']+)''\)'))[1]::timestamptz,
    (regexp_match(b.expr, 'TO \(''([^'']+)''\)'))[1]::timestamptz
FROM pg_inherits i
JOIN pg_class p ON p.oid = i.inhrelid
CROSS JOIN LATERAL (SELECT pg_get_expr(p.relpartbound, p.oid) AS expr) b
WHERE i.inhparent = $1::regclass
ORDER BY b.expr = 'DEFAULT', 3 NULLS FIRST`, d.archive())
	if err != nil {
		return st, wrap(err)
	}
	var (
		part     driver.ArchivePartition
		from, to pgtype.Timestamptz
	)
	_, err = pgx.ForEachRow(rows, []any{&part.Name, &part.Default, &from, &to}, func() error {
		p := part
		p.From, p.To = from.Time, to.Time
		st.partitions = append(st.partitions, p)
		return nil
	})
	return st, wrap(err)
}

// ArchivePartitions lists the archive's partitions, oldest first.
func (d *Driver) ArchivePartitions(ctx context.Context) (string, []driver.ArchivePartition, error) {
	st, err := d.archiveState(ctx, d.pool)
	if err != nil || !st.partitioned {
		return "", nil, err
	}
	if st.period == "" {
		return "", nil, d.unknownPeriod()
	}
	return st.period, st.partitions, nil
}

func (d *Driver) unknownPeriod() error {
	return fmt.Errorf("cannot tell the partition period of %s: its table comment must start with %q followed by daily or weekly (outbox migrate --partition-archive sets it)",
		d.archive(), periodComment)
}

// MaintainArchive creates the partitions ahead in its own transaction. On a
// plain archive it is one catalog read and no transaction.
func (d *Driver) MaintainArchive(ctx context.Context) (driver.PartitionResult, error) {
	var res driver.PartitionResult
	if st, err := d.archiveState(ctx, d.pool); err != nil || !st.partitioned {
		return res, err
	}
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		res = driver.PartitionResult{}
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+maintainLockTimeout+`'`); err != nil {
			return err
		}
		return d.maintain(ctx, tx, &res)
	})
	return res, wrap(err)
}

// maintain creates the missing partitions from the current period to
// partitionsAhead periods on, under the partition lock: a second caller
// waits, then finds them made.
func (d *Driver) maintain(ctx context.Context, tx pgx.Tx, res *driver.PartitionResult) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))`, partitionLockKey, d.schema); err != nil {
		return err
	}
	st, err := d.archiveState(ctx, tx)
	if err != nil || !st.partitioned {
		return err
	}
	if st.period == "" {
		return d.unknownPeriod()
	}
	res.Period = st.period
	start := periodStart(st.period, st.now)
	for i := range partitionsAhead(st.period) + 1 {
		lo, hi := addPeriods(st.period, start, i), addPeriods(st.period, start, i+1)
		if covered(st.partitions, lo, hi) {
			continue
		}
		name := archiveName + "_" + lo.Format("20060102")
		moved, err := d.createPartition(ctx, tx, st, name, lo, hi)
		if err != nil {
			return fmt.Errorf("create partition %s: %w", d.ident(name), err)
		}
		res.Created = append(res.Created, name)
		res.Moved += moved
	}
	return nil
}

// covered reports whether any partition overlaps [lo, hi). The partition of
// the archive from before partitioning covers the rest of the period in
// which it was converted.
func covered(parts []driver.ArchivePartition, lo, hi time.Time) bool {
	for _, p := range parts {
		if p.Default {
			continue
		}
		if (p.From.IsZero() || p.From.Before(hi)) && p.To.After(lo) {
			return true
		}
	}
	return false
}

// createPartition creates [lo, hi) as a table of its own, moves in the rows
// the default partition caught for it, and attaches it. ATTACH takes only a
// SHARE UPDATE EXCLUSIVE lock on the archive (CREATE TABLE … PARTITION OF
// would take an ACCESS EXCLUSIVE one and stop the relays' inserts), and the
// CHECK constraint spares it the scan of the new table.
func (d *Driver) createPartition(ctx context.Context, tx pgx.Tx, st archiveState, name string, lo, hi time.Time) (int64, error) {
	part, from, to := d.ident(name), timestampLiteral(lo), timestampLiteral(hi)
	stmts := []string{
		`CREATE TABLE ` + part + ` (LIKE ` + d.archive() + ` INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`,
		`ALTER TABLE ` + part + ` ADD CONSTRAINT outbox_partition_bound CHECK (processed_at >= ` + from + ` AND processed_at < ` + to + `)`,
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return 0, err
		}
	}
	var moved int64
	for _, p := range st.partitions {
		if !p.Default {
			continue
		}
		// ATTACH checks that the default partition holds no row of the new
		// range; lock it first so no insert lands there between the move
		// and the check. Nothing else routes rows to it in normal operation.
		def := d.ident(p.Name)
		if _, err := tx.Exec(ctx, `LOCK TABLE `+def+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return 0, err
		}
		tag, err := tx.Exec(ctx, `WITH moved AS (
    DELETE FROM `+def+` WHERE processed_at >= $1 AND processed_at < $2 RETURNING *
)
INSERT INTO `+part+` SELECT * FROM moved`, lo, hi)
		if err != nil {
			return 0, err
		}
		moved = tag.RowsAffected()
	}
	stmts = []string{
		`ALTER TABLE ` + d.archive() + ` ATTACH PARTITION ` + part + ` FOR VALUES FROM (` + from + `) TO (` + to + `)`,
		`ALTER TABLE ` + part + ` DROP CONSTRAINT outbox_partition_bound`,
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return 0, err
		}
	}
	return moved, nil
}

// PurgeArchivePartitions drops the partitions wholly before the cutoff.
func (d *Driver) PurgeArchivePartitions(ctx context.Context, olderThan time.Duration, progress func(int64)) (int64, bool, error) {
	st, err := d.archiveState(ctx, d.pool)
	if err != nil || !st.partitioned {
		return 0, false, err
	}
	cutoff := st.now.Add(-olderThan)
	var total int64
	for _, p := range st.partitions {
		if p.Default || p.To.After(cutoff) {
			continue
		}
		n, err := d.dropPartition(ctx, p.Name)
		if err != nil {
			return total, true, fmt.Errorf("drop partition %s: %w", d.ident(p.Name), err)
		}
		total += n
		if progress != nil && n > 0 {
			progress(total)
		}
	}
	return total, true, nil
}

// dropPartition counts a partition's rows, then detaches and drops it. No
// relay inserts into a partition wholly in the past, so the count stays
// true. Detaching takes an ACCESS EXCLUSIVE lock on the archive, which
// queues the relays' archive inserts behind it: the wait for it is short and
// retried rather than long.
func (d *Driver) dropPartition(ctx context.Context, name string) (int64, error) {
	part := d.ident(name)
	var n int64
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM `+part).Scan(&n); err != nil {
		return 0, wrap(err)
	}
	for attempt := 1; ; attempt++ {
		err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			stmts := []string{
				`SET LOCAL lock_timeout = '` + dropLockTimeout + `'`,
				`ALTER TABLE ` + d.archive() + ` DETACH PARTITION ` + part,
				`DROP TABLE ` + part,
			}
			for _, s := range stmts {
				if _, err := tx.Exec(ctx, s); err != nil {
					return err
				}
			}
			return nil
		})
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55P03" || attempt == dropAttempts {
			return n, err
		}
		t := time.NewTimer(time.Duration(attempt) * 100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
	}
}
