package pgdriver_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
)

type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	drv    *pgdriver.Driver
}

func setup(t *testing.T) bundle {
	t.Helper()
	pool, schema := testutil.Schema(t)
	return bundle{ctx: context.Background(), pool: pool, schema: schema, drv: pgdriver.New(pool, schema)}
}

func (b bundle) insert(t *testing.T, n int) []int64 {
	t.Helper()
	events := make([]driver.NewEvent, n)
	for i := range events {
		events[i] = driver.NewEvent{EventType: "e", Payload: []byte(fmt.Sprint(i)), Headers: []byte(`{}`)}
	}
	b.insertEvents(t, events)
	rows, err := b.pool.Query(b.ctx, `SELECT id FROM `+b.drv.Table()+` ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}

// insertEvents inserts events with the writer's statement.
func (b bundle) insertEvents(t *testing.T, events []driver.NewEvent) {
	t.Helper()
	ins := pgdriver.NewInsert(b.schema)
	rows, err := b.pool.Query(b.ctx, ins.SQL, ins.Args(events)...)
	require.NoError(t, err)
	rows.Close()
	require.NoError(t, rows.Err())
}

func (b bundle) claim(t *testing.T, relay string, n int, lease time.Duration) driver.Claim {
	t.Helper()
	c, err := b.drv.Claim(b.ctx, driver.ClaimParams{RelayID: relay, BatchSize: n, Lease: lease})
	require.NoError(t, err)
	return c
}

func claimIDs(c driver.Claim) []int64 {
	ids := make([]int64, len(c.Events))
	for i, e := range c.Events {
		ids[i] = e.ID
	}
	return ids
}

// A claim copies each event's columns out of the driver's buffers: they
// hold the next row by the time the sink sees the batch.
func TestClaimEventsAreTheirOwn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 300
	b.insertVaried(t, n, 1)
	c := b.claim(t, "r", n, time.Minute)
	require.Len(t, c.Events, n)
	for i, e := range c.Events {
		require.Equal(t, fmt.Sprintf("type.%d", i), e.EventType)
		require.Equal(t, "agg"+strings.Repeat("x", i%7), e.AggregateType)
		require.Equal(t, fmt.Sprint(i*7), e.AggregateID)
		require.JSONEq(t, fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("p", i)), string(e.Payload))
		require.Equal(t, fmt.Sprintf("key-%d-0", i), e.IdempotencyKey)
		if i%100 == 0 {
			require.Equal(t, map[string]string{"h": fmt.Sprint(i)}, e.Headers)
		} else {
			require.Nil(t, e.Headers)
		}
		require.Equal(t, len(e.Payload), cap(e.Payload), "a sink's append to a payload must not overwrite the next")
	}
}

// A claim allocates per batch, not per event. Not parallel: AllocsPerRun
// counts the whole process's allocations.
func TestClaimAllocatesPerBatch(t *testing.T) {
	b := setup(t)
	const n = 300
	b.insertVaried(t, n, 3)
	allocs := testing.AllocsPerRun(2, func() {
		c, err := b.drv.Claim(b.ctx, driver.ClaimParams{RelayID: "r", BatchSize: n, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, c.Events, n)
	})
	t.Logf("%.0f allocations per claim of %d events", allocs, n)
	// Per event: nothing but the three events' headers (a dozen each); per
	// batch: the arena's buffers, the growing event slice and pgx's own.
	// One allocation per event would add n.
	require.Less(t, allocs, float64(n)/2, "allocations per claim of %d events", n)
}

// insertVaried inserts rounds batches of n events whose columns differ
// from event to event; every hundredth has headers.
func (b bundle) insertVaried(t *testing.T, n, rounds int) {
	t.Helper()
	events := make([]driver.NewEvent, n)
	for i := range events {
		events[i] = driver.NewEvent{EventType: fmt.Sprintf("type.%d", i), AggregateType: "agg" + strings.Repeat("x", i%7),
			AggregateID: fmt.Sprint(i * 7), Payload: []byte(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("p", i))),
			Headers: []byte(`{}`), IdempotencyKey: fmt.Sprintf("key-%d", i)}
		if i%100 == 0 {
			events[i].Headers = []byte(fmt.Sprintf(`{"h":"%d"}`, i))
		}
	}
	keys := make([]string, n)
	for i := range events {
		keys[i] = events[i].IdempotencyKey
	}
	for round := range rounds {
		for i := range events {
			events[i].IdempotencyKey = fmt.Sprintf("%s-%d", keys[i], round)
		}
		b.insertEvents(t, events)
	}
}

func TestClaimTakesExactlyTheLimitInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.insert(t, 25)
	c := b.claim(t, "r1", 10, time.Minute)
	require.Equal(t, ids[:10], claimIDs(c))
	for _, e := range c.Events {
		require.Equal(t, driver.StatusProcessing, e.Status)
		require.Equal(t, "r1", e.LockedBy)
		require.Equal(t, c.LockedUntil, e.LockedUntil)
	}
	// The lease is set by the database clock: now() + lease.
	var dbNow time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT now()`).Scan(&dbNow))
	require.WithinDuration(t, dbNow.Add(time.Minute), c.LockedUntil, 5*time.Second)

	c2 := b.claim(t, "r2", 100, time.Minute)
	require.Equal(t, ids[10:], claimIDs(c2))
	require.Empty(t, b.claim(t, "r3", 100, time.Minute).Events)
}

func TestClaimSkipsLockedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.insert(t, 10)
	// Another relay's claim transaction is still open on the first 4 rows.
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SELECT id FROM `+b.drv.Table()+` WHERE id = ANY($1) FOR UPDATE`, ids[:4])
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	c, err := b.drv.Claim(ctx, driver.ClaimParams{RelayID: "r", BatchSize: 100, Lease: time.Minute})
	require.NoError(t, err, "claim must not wait on locked rows")
	require.Equal(t, ids[4:], claimIDs(c))
}

func TestClaimSkipsFutureEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.insert(t, 3)
	_, err := b.pool.Exec(b.ctx, `UPDATE `+b.drv.Table()+` SET available_at = now() + interval '1 hour' WHERE id = $1`, ids[1])
	require.NoError(t, err)
	require.Equal(t, []int64{ids[0], ids[2]}, claimIDs(b.claim(t, "r", 10, time.Minute)))
}

func TestConcurrentClaimsAreDisjoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, 2000)
	var (
		mu   sync.Mutex
		seen = map[int64]string{}
		wg   sync.WaitGroup
	)
	for r := range 6 {
		wg.Go(func() {
			relay := fmt.Sprint("r", r)
			for {
				c, err := b.drv.Claim(b.ctx, driver.ClaimParams{RelayID: relay, BatchSize: 37, Lease: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				if len(c.Events) == 0 {
					return
				}
				mu.Lock()
				for _, e := range c.Events {
					if prev, dup := seen[e.ID]; dup {
						t.Errorf("event %d claimed by %s and %s", e.ID, prev, relay)
					}
					seen[e.ID] = relay
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, 2000)
}

func TestMarksAreFencedByLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, 3)
	stale := b.claim(t, "slow", 10, time.Minute)
	require.Len(t, stale.Events, 3)

	// The slow relay's lease expires; the rows are rescued and re-claimed.
	_, err := b.pool.Exec(b.ctx, `UPDATE `+b.drv.Table()+` SET locked_until = now() - interval '1 second'`)
	require.NoError(t, err)
	rescued, err := b.drv.RescueExpired(b.ctx, driver.RescueParams{Limit: 100, MaxAttempts: 5})
	require.NoError(t, err)
	require.Len(t, rescued.Rescued, 3)
	fresh := b.claim(t, "fast", 10, time.Minute)
	require.Len(t, fresh.Events, 1, "a rescued event is claimed alone")

	staleFence := driver.Fence{RelayID: "slow", LockedUntil: stale.LockedUntil}
	ids := claimIDs(stale)
	n, err := b.drv.MarkProcessed(b.ctx, staleFence, ids, driver.RetainProcessed)
	require.NoError(t, err)
	require.Zero(t, n, "stale relay marked rows it no longer holds")
	res, err := b.drv.MarkFailed(b.ctx, staleFence, 5, []driver.Failure{{ID: ids[0], Error: "x"}})
	require.NoError(t, err)
	require.Empty(t, res.Dead)
	require.Empty(t, res.Retried)
	n, err = b.drv.Release(b.ctx, staleFence, ids)
	require.NoError(t, err)
	require.Zero(t, n)

	// The same relay ID with an older lease is fenced out too.
	old := driver.Fence{RelayID: "fast", LockedUntil: fresh.LockedUntil.Add(-time.Microsecond)}
	n, err = b.drv.MarkProcessed(b.ctx, old, ids, driver.RetainDelete)
	require.NoError(t, err)
	require.Zero(t, n)

	n, err = b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "fast", LockedUntil: fresh.LockedUntil}, ids, driver.RetainProcessed)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

func TestMarkFailedRetriesThenDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.insert(t, 2)
	_, err := b.pool.Exec(b.ctx, `UPDATE `+b.drv.Table()+` SET max_attempts = 1 WHERE id = $1`, ids[1])
	require.NoError(t, err)
	c := b.claim(t, "r", 10, time.Minute)
	f := driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}
	res, err := b.drv.MarkFailed(b.ctx, f, 3, []driver.Failure{
		{ID: ids[0], Error: "down", Delay: 2 * time.Second},
		{ID: ids[1], Error: "down", Delay: 2 * time.Second},
	})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[0]}, res.Retried)
	require.Equal(t, []int64{ids[1]}, res.Dead)

	e, err := b.drv.GetEvent(b.ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, driver.StatusPending, e.Status)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, "down", e.LastError)
	require.Equal(t, 2*time.Second, e.AvailableAt.Sub(e.UpdatedAt))
	require.True(t, e.LockedUntil.IsZero())
}

func TestClaimPlanUsesPendingIndexUnderGenericPlan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A table dominated by processed rows, as in production.
	_, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.drv.Table()+` (event_type, payload, status, processed_at)
		SELECT 'e', '{}', 'processed', now() FROM generate_series(1, 20000)`)
	require.NoError(t, err)
	b.insert(t, 10)
	_, err = b.pool.Exec(b.ctx, `ANALYZE `+b.drv.Table())
	require.NoError(t, err)

	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SET LOCAL plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	require.NoError(t, b.drv.EnsureCaptureTable(b.ctx))
	for name, prepare := range map[string]string{
		"claim":         `PREPARE claim_plan(int, text, bigint) AS ` + pgdriver.ClaimSQL(b.drv),
		"claim_budget":  `PREPARE claim_budget_plan(int, text, bigint, bigint) AS ` + pgdriver.ClaimBudgetSQL(b.drv),
		"claim_capture": `PREPARE claim_capture_plan(int, text, bigint, text, int) AS ` + pgdriver.ClaimCaptureSQL(b.drv),
		"claim_capture_filtered": `PREPARE claim_capture_filtered_plan(int, text, bigint, text, int, text[]) AS ` +
			pgdriver.ClaimCaptureFilteredSQL(b.drv),
	} {
		_, err = tx.Exec(b.ctx, prepare)
		require.NoError(t, err)
		args := "(100, 'r', 30000)"
		switch name {
		case "claim_budget":
			args = "(100, 'r', 30000, 1048576)"
		case "claim_capture":
			args = "(100, 'r', 30000, 'slot', 1000)"
		case "claim_capture_filtered":
			args = "(100, 'r', 30000, 'slot', 1000, '{a.%}')"
		}
		rows, err := tx.Query(b.ctx, `EXPLAIN EXECUTE `+name+`_plan`+args)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		plan := strings.Join(lines, "\n")
		t.Log(plan)
		require.Contains(t, plan, "outbox_events_pending_idx", plan)
		require.NotContains(t, plan, "Seq Scan", plan)
		// The join to the table is by its primary key, never a scan of it.
		require.Contains(t, plan, "outbox_events_pkey", plan)
		if strings.HasPrefix(name, "claim_capture") {
			// The window's bound is an index condition: the scan stops
			// at the window's end, whatever the filter rejects.
			require.Regexp(t, `Index Cond: \(.*ROW\(available_at, id\) <= ROW\(\$\d+, \$\d+\)`, plan)
		}
	}
}

func TestRequeueAndPurge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.insert(t, 5)
	_, err := b.pool.Exec(b.ctx, `UPDATE `+b.drv.Table()+` SET status = 'failed', attempts = 5 WHERE id = ANY($1)`, ids[:3])
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE `+b.drv.Table()+` SET status = 'processed', processed_at = now() - interval '2 days' WHERE id = ANY($1)`, ids[3:])
	require.NoError(t, err)

	changed, err := b.drv.Requeue(b.ctx, []int64{ids[0], ids[3], 999999}, []string{driver.StatusFailed})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[0]}, changed)
	e, err := b.drv.GetEvent(b.ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, driver.StatusPending, e.Status)
	require.Zero(t, e.Attempts)

	n, last, err := b.drv.RequeueStatus(b.ctx, driver.StatusFailed, 0, 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, ids[1], last)
	n, last, err = b.drv.RequeueStatus(b.ctx, driver.StatusFailed, last, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, ids[2], last)

	n, err = b.drv.PurgeBatch(b.ctx, driver.PurgeParams{Status: driver.StatusProcessed, OlderThan: 72 * time.Hour, BatchSize: 10})
	require.NoError(t, err)
	require.Zero(t, n, "nothing is older than 3 days")
	n, err = b.drv.PurgeBatch(b.ctx, driver.PurgeParams{Status: driver.StatusProcessed, OlderThan: 24 * time.Hour, BatchSize: 1})
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "one batch deletes at most the batch size")
	s, err := b.drv.Stats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, driver.Stats{Pending: 3, Processed: 1, OldestPendingAge: s.OldestPendingAge}, s)
	require.Positive(t, s.OldestPendingAge)
}

func TestGetEventNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.drv.GetEvent(b.ctx, 12345)
	require.ErrorIs(t, err, driver.ErrNotFound)
}

func TestMigrateIsIdempotentAndSafeConcurrently(t *testing.T) {
	t.Parallel()
	pool := testutil.Pool(t)
	schema := testutil.EmptySchemaName(t)
	var wg sync.WaitGroup
	applied := make([]int, 4)
	for i := range applied {
		wg.Go(func() {
			ms, err := pgdriver.Migrate(context.Background(), pool, schema)
			if err != nil {
				t.Error(err)
			}
			applied[i] = len(ms)
		})
	}
	wg.Wait()
	total := 0
	for _, n := range applied {
		total += n
	}
	require.Equal(t, len(pgdriver.Migrations()), total, "each migration applied exactly once")
	v, err := pgdriver.Version(context.Background(), pool, schema)
	require.NoError(t, err)
	require.Equal(t, pgdriver.Migrations()[len(pgdriver.Migrations())-1].Version, v)
	require.NoError(t, pgdriver.New(pool, schema).Ping(context.Background()))
}

func TestMigrationSQLAppliesAsPrinted(t *testing.T) {
	t.Parallel()
	pool := testutil.Pool(t)
	schema := testutil.EmptySchemaName(t) + `"odd'name`
	t.Cleanup(func() { testutil.DropSchema(t, pool, schema) })
	_, err := pool.Exec(context.Background(), pgdriver.MigrationSQL(schema))
	require.NoError(t, err)
	require.NoError(t, pgdriver.New(pool, schema).Ping(context.Background()))
	// The printed script works with the writer's insert (sequence name and all).
	ins := pgdriver.NewInsert(schema)
	rows, err := pool.Query(context.Background(), ins.SQL, ins.Args([]driver.NewEvent{{EventType: "x", Payload: []byte("1"), Headers: []byte("{}")}})...)
	require.NoError(t, err)
	rows.Close()
	require.NoError(t, rows.Err())
}

func TestPingMissingTable(t *testing.T) {
	t.Parallel()
	err := pgdriver.New(testutil.Pool(t), testutil.EmptySchemaName(t)).Ping(context.Background())
	require.ErrorIs(t, err, driver.ErrNoTable)
}

func TestRetentionModes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.insert(t, 9)
	count := func(table string) int {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+table).Scan(&n))
		return n
	}
	archive := pgx.Identifier{b.schema, "outbox_events_archive"}.Sanitize()
	for i, mode := range []driver.Retention{driver.RetainProcessed, driver.RetainDelete, driver.RetainArchive} {
		c := b.claim(t, "r", 3, time.Minute)
		require.Equal(t, ids[i*3:i*3+3], claimIDs(c))
		// A fence from another lease changes nothing, whatever the mode.
		n, err := b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "other", LockedUntil: c.LockedUntil}, claimIDs(c), mode)
		require.NoError(t, err)
		require.Zero(t, n, mode)
		n, err = b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}, claimIDs(c), mode)
		require.NoError(t, err)
		require.EqualValues(t, 3, n, mode)
	}
	require.Equal(t, 3, count(b.drv.Table()), "processed kept, deleted and archived gone")
	require.Equal(t, 3, count(archive))
	var status string
	var processedAt *time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT status, processed_at FROM `+archive+` WHERE id = $1`, ids[6]).Scan(&status, &processedAt))
	require.Equal(t, "processed", status)
	require.NotNil(t, processedAt)

	n, err := b.drv.PurgeArchiveBatch(b.ctx, time.Hour, 10)
	require.NoError(t, err)
	require.Zero(t, n, "nothing archived an hour ago")
	_, err = b.pool.Exec(b.ctx, `UPDATE `+archive+` SET processed_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	n, err = b.drv.PurgeArchiveBatch(b.ctx, time.Hour, 2)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
}

// TestEstimateStatsOnATableNeverAnalyzed: a new table's reltuples is -1
// until autovacuum or ANALYZE runs; the processed estimate must not read 0
// for all its history meanwhile.
func TestEstimateStatsOnATableNeverAnalyzed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.insert(t, 20)
	_, err := b.pool.Exec(b.ctx, `UPDATE `+b.drv.Table()+` SET status = 'processed', processed_at = now() WHERE id = ANY($1)`, ids[:15])
	require.NoError(t, err)
	var reltuples float64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT reltuples FROM pg_class WHERE oid = $1::regclass`, b.drv.Table()).Scan(&reltuples))
	require.Negative(t, reltuples, "the table was never analyzed")
	// The statistics system publishes a backend's counts when it goes idle,
	// at most once a second.
	testutil.WaitFor(t, 15*time.Second, "the processed estimate counts the table's rows", func() bool {
		s, err := b.drv.EstimateStats(b.ctx)
		require.NoError(t, err)
		require.EqualValues(t, 5, s.Pending)
		return s.Processed == 15
	})
}
