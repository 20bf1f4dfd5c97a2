package drivertest_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/internal/driver/mysqldriver"
	"github.com/outboxkit/outbox/internal/driver/sqldriver"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxmigrate"
)

func mysqlKeysSetup(t *testing.T) (context.Context, *sql.DB, *sqldriver.Driver, *outbox.Writer) {
	t.Helper()
	ctx := context.Background()
	_, db := drivertest.MySQLDatabase(t)
	drv := mysqldriver.New(db, "")
	_, err := drv.Migrate(ctx)
	require.NoError(t, err)
	require.NoError(t, drv.PrepareOrdering(ctx))
	return ctx, db, drv.Driver, outbox.NewWriter(outbox.WriterConfig{Dialect: outbox.DialectMariaDB})
}

func keyRows(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SELECT `aggregate_id` FROM `outbox_keys` ORDER BY `aggregate_id`")
	require.NoError(t, err)
	defer func() { _ = rows.Close() }()
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

// pruneAll walks outbox_keys in batches of size and returns the rows
// deleted and the batches run.
func pruneAll(t *testing.T, ctx context.Context, kp driver.KeyPruner, size int) (int64, int) {
	t.Helper()
	var (
		total   int64
		batches int
		cur     driver.KeyCursor
	)
	for {
		n, next, more, err := kp.PruneKeysBatch(ctx, cur, size)
		require.NoError(t, err)
		total += n
		batches++
		if !more {
			return total, batches
		}
		cur = next
	}
}

// Key rows go when their aggregate has no pending, processing or failed
// event (processed or purged ones do not count); a row a writer holds is
// passed over without waiting.
func TestMySQLPruneKeys(t *testing.T) {
	t.Parallel()
	ctx, db, drv, w := mysqlKeysSetup(t)
	write := func(key string) int64 {
		res, err := w.WriteSQL(ctx, db, outbox.Message{EventType: "e", AggregateType: "order", AggregateID: key, Payload: key})
		require.NoError(t, err)
		return res.IDs[0]
	}
	setStatus := func(id int64, status string) {
		_, err := db.Exec("UPDATE `outbox_events` SET `status` = ?, `processed_at` = IF(? = 'processed', UTC_TIMESTAMP(6), NULL),"+
			" `locked_until` = IF(? = 'processing', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, NULL) WHERE `id` = ?", status, status, status, id)
		require.NoError(t, err)
	}
	write("pending")
	setStatus(write("processing"), "processing")
	setStatus(write("failed"), "failed")
	setStatus(write("processed"), "processed")
	setStatus(write("mixed"), "processed")
	write("mixed")
	purged := write("purged")
	_, err := db.Exec("DELETE FROM `outbox_events` WHERE `id` = ?", purged)
	require.NoError(t, err)
	for i := range 5 {
		setStatus(write("done"+strconv.Itoa(i)), "processed")
	}
	_, err = w.WriteSQL(ctx, db, outbox.Message{EventType: "e", Payload: "no key"})
	require.NoError(t, err)

	// A writer in flight on "held", whose committed events are all
	// processed: its row is locked and passed over.
	setStatus(write("held"), "processed")
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = w.WriteSQL(ctx, tx, outbox.Message{EventType: "e", AggregateType: "order", AggregateID: "held", Payload: "x"})
	require.NoError(t, err)

	n, batches := pruneAll(t, ctx, drv, 2)
	require.Equal(t, int64(7), n, "processed, purged, done0..done4")
	require.Equal(t, 6, batches, "11 rows not held, 2 a batch")
	require.Equal(t, []string{"failed", "held", "mixed", "pending", "processing"}, keyRows(t, db))

	// The held key's writer commits: its event is pending, the row stays.
	require.NoError(t, tx.Commit())
	n, _ = pruneAll(t, ctx, drv, 1000)
	require.Zero(t, n)

	// A pruned key written again starts at 1.
	id := write("processed")
	requireKeySeq(t, db, id, 1)
	id = write("pending")
	requireKeySeq(t, db, id, 2)
}

// waitPruned polls until key's row is gone from outbox_keys, for at most a
// minute.
func waitPruned(ctx context.Context, db *sql.DB, key string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM `outbox_keys` WHERE `aggregate_id` = ?", key).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("key %s was not pruned within a minute", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func requireKeySeq(t *testing.T, db *sql.DB, id, want int64) {
	t.Helper()
	var got int64
	require.NoError(t, db.QueryRow("SELECT `key_seq` FROM `outbox_events` WHERE `id` = ?", id).Scan(&got))
	require.Equal(t, want, got, "key_seq of event %d", id)
}

// Writers, an ordered drain and pruning all run at once: each key's writer
// commits its events one after another, so their payloads count up, and
// the drain must deliver every key's events in that order, whatever rows
// the pruning deleted (and the writers recreated at 1) in between.
func TestMySQLPruneKeysConcurrentOrder(t *testing.T) {
	t.Parallel()
	ctx, db, drv, w := mysqlKeysSetup(t)
	const (
		keys   = 8
		perKey = 40
	)
	var (
		wg       sync.WaitGroup
		writeErr = make(chan error, keys)
		writing  atomic.Int32
	)
	writing.Store(keys)
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer writing.Add(-1)
			key := fmt.Sprint("k", k)
			for i := range perKey {
				if i%5 == 4 {
					// Now and then, wait for the key's row to be pruned, so
					// that the key restarts at 1 while the others run.
					if err := waitPruned(ctx, db, key); err != nil {
						writeErr <- err
						return
					}
				}
				msgs := []outbox.Message{{EventType: "e", AggregateType: "order", AggregateID: key, Payload: i}}
				tx, err := db.BeginTx(ctx, nil)
				if err == nil {
					_, err = w.WriteSQL(ctx, tx, msgs...)
				}
				if err == nil {
					err = tx.Commit()
				} else if tx != nil {
					_ = tx.Rollback()
				}
				if err != nil {
					writeErr <- fmt.Errorf("key %d event %d: %w", k, i, err)
					return
				}
			}
		}()
	}

	var pruned atomic.Int64
	stopPrune := make(chan struct{})
	pruneErr := make(chan error, 1)
	go func() {
		defer close(pruneErr)
		var cur driver.KeyCursor
		for {
			select {
			case <-stopPrune:
				return
			default:
			}
			n, next, more, err := drv.PruneKeysBatch(ctx, cur, 3)
			if err != nil {
				pruneErr <- err
				return
			}
			pruned.Add(n)
			if more {
				cur = next
			} else {
				cur = driver.KeyCursor{}
			}
		}
	}()

	got := map[string][]int{}
	delivered := 0
	deadline := time.Now().Add(2 * time.Minute)
	for delivered < keys*perKey {
		require.True(t, time.Now().Before(deadline), "drained %d of %d", delivered, keys*perKey)
		select {
		case err := <-writeErr:
			require.NoError(t, err)
		default:
		}
		c, err := drv.ClaimOrdered(ctx, driver.OrderedClaimParams{RelayID: "r", BatchSize: 7, Lease: time.Minute})
		require.NoError(t, err)
		ids := make([]int64, 0, len(c.Events))
		for _, e := range c.Events {
			i, err := strconv.Atoi(string(e.Payload))
			require.NoError(t, err)
			got[e.AggregateID] = append(got[e.AggregateID], i)
			ids = append(ids, e.ID)
		}
		delivered += len(ids)
		if len(ids) > 0 {
			n, err := drv.MarkProcessed(ctx, driver.Fence{RelayID: "r", LockedUntil: c.LockedUntil}, ids, driver.RetainProcessed)
			require.NoError(t, err)
			require.Equal(t, int64(len(ids)), n)
		}
	}
	wg.Wait()
	close(stopPrune)
	require.NoError(t, <-pruneErr)
	for k := range keys {
		want := make([]int, perKey)
		for i := range want {
			want[i] = i
		}
		require.Equal(t, want, got[fmt.Sprint("k", k)], "key k%d in write order", k)
	}
	require.Positive(t, pruned.Load(), "pruning deleted rows while the keys were written")
	var restarted int
	require.NoError(t, db.QueryRow("SELECT count(*) FROM `outbox_events` WHERE `key_seq` = 1 AND `payload` <> '0'").Scan(&restarted))
	require.GreaterOrEqual(t, restarted, keys*(perKey/5), "every key restarted at 1 after each wait for a prune")
}

// The step the pruning's safety rests on: a writer whose trigger waits on a
// key row that the pruning transaction locked and deletes goes on once that
// commits, and starts the key at 1 (rather than failing, or numbering after
// the deleted row).
func TestMySQLWriterWaitsOnPrunedKey(t *testing.T) {
	t.Parallel()
	ctx, db, _, w := mysqlKeysSetup(t)
	msg := outbox.Message{EventType: "e", AggregateType: "order", AggregateID: "a", Payload: 1}
	for range 3 {
		_, err := w.WriteSQL(ctx, db, msg)
		require.NoError(t, err)
	}
	_, err := db.Exec("UPDATE `outbox_events` SET `status` = 'processed', `processed_at` = UTC_TIMESTAMP(6)")
	require.NoError(t, err)

	prune, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer func() { _ = prune.Rollback() }()
	var seq int64
	require.NoError(t, prune.QueryRowContext(ctx, "SELECT `seq` FROM `outbox_keys` WHERE `aggregate_type` = 'order' AND `aggregate_id` = 'a' FOR UPDATE SKIP LOCKED").Scan(&seq))
	require.Equal(t, int64(3), seq)

	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	var writerID int64
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&writerID))
	type result struct {
		id  int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := w.WriteSQL(ctx, conn, msg)
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{id: res.IDs[0]}
	}()
	testutil.WaitFor(t, 10*time.Second, "the writer waits on key a's row", func() bool {
		select {
		case r := <-done:
			require.Failf(t, "the writer did not wait", "id %d, err %v", r.id, r.err)
		default:
		}
		var n int
		require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.PROCESSLIST
WHERE ID = ? AND INFO LIKE 'INSERT INTO `+"`outbox_keys`"+`%'`, writerID).Scan(&n))
		return n == 1
	})
	_, err = prune.ExecContext(ctx, "DELETE FROM `outbox_keys` WHERE `aggregate_type` = 'order' AND `aggregate_id` = 'a'")
	require.NoError(t, err)
	require.NoError(t, prune.Commit())
	r := <-done
	require.NoError(t, r.err)
	requireKeySeq(t, db, r.id, 1)
	require.Equal(t, []string{"a"}, keyRows(t, db))
}

// The key-sequence trigger is opt-in: a schema at migration 7 numbers
// nothing, an ordered relay refuses to start there with the fix in its
// error, and outbox migrate's Ordering creates the trigger (twice is
// fine), after which the relay starts and events are numbered.
func TestMySQLOrderingNeedsPreparedSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, db := drivertest.MySQLDatabase(t)
	database := outbox.MySQL(db)
	res, err := outboxmigrate.Migrate(ctx, database, outboxmigrate.Config{})
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.Version, driver.OrderedVersion)
	drv := mysqldriver.New(db, "")
	require.ErrorIs(t, drv.OrderingPrepared(ctx), driver.ErrOrderingNotPrepared)
	w := outbox.NewWriter(outbox.WriterConfig{Dialect: outbox.DialectMariaDB})
	msg := outbox.Message{EventType: "e", AggregateType: "order", AggregateID: "a", Payload: 1}
	before, err := w.WriteSQL(ctx, db, msg)
	require.NoError(t, err)
	requireKeySeq(t, db, before.IDs[0], 0)
	require.Empty(t, keyRows(t, db), "no trigger, no key rows")

	start := func() error {
		r, err := outbox.NewRelay(database, outbox.RelayConfig{Sink: outbox.SinkFunc(func(context.Context, []outbox.Event) []error { return nil }),
			Ordering: outbox.OrderingAggregate, PollInterval: time.Hour})
		require.NoError(t, err)
		if err := r.Start(ctx); err != nil {
			return err
		}
		return r.Stop(ctx)
	}
	require.ErrorContains(t, start(), "run outbox migrate --ordering aggregate")

	for range 2 {
		_, err = outboxmigrate.Migrate(ctx, database, outboxmigrate.Config{Ordering: outbox.OrderingAggregate})
		require.NoError(t, err)
	}
	require.NoError(t, drv.OrderingPrepared(ctx))
	require.NoError(t, start())
	after, err := w.WriteSQL(ctx, db, msg)
	require.NoError(t, err)
	requireKeySeq(t, db, after.IDs[0], 1)
	require.Contains(t, outboxmigrate.SQL(database, outboxmigrate.Config{Ordering: outbox.OrderingAggregate}), "CREATE TRIGGER `outbox_events_key_seq`")
	require.NotContains(t, outboxmigrate.SQL(database, outboxmigrate.Config{}), "CREATE TRIGGER")
}

type purgeHook chan outbox.PurgeInfo

func (h purgeHook) OnPurge(_ context.Context, p outbox.PurgeInfo) { h <- p }

// The scheduled purge prunes outbox_keys after its deletes and counts the
// rows in PurgeInfo.Keys; Manager.PruneKeys (outbox purge) does the same.
func TestMySQLPurgePrunesKeys(t *testing.T) {
	t.Parallel()
	ctx, db, _, w := mysqlKeysSetup(t)
	write := func(key string) int64 {
		res, err := w.WriteSQL(ctx, db, outbox.Message{EventType: "e", AggregateType: "order", AggregateID: key, Payload: key})
		require.NoError(t, err)
		return res.IDs[0]
	}
	old, failed := write("old"), write("failed")
	_, err := db.Exec("UPDATE `outbox_events` SET `status` = 'processed', `processed_at` = UTC_TIMESTAMP(6) - INTERVAL 2 DAY WHERE `id` = ?", old)
	require.NoError(t, err)
	_, err = db.Exec("UPDATE `outbox_events` SET `status` = 'failed' WHERE `id` = ?", failed)
	require.NoError(t, err)

	hook := make(purgeHook, 1)
	database := outbox.MySQL(db)
	r, err := outbox.NewRelay(database, outbox.RelayConfig{Sink: outbox.SinkFunc(func(context.Context, []outbox.Event) []error { return nil }),
		PollInterval: time.Hour, PurgeAfter: 24 * time.Hour, Hooks: []outbox.Hook{hook}})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	var info outbox.PurgeInfo
	select {
	case info = <-hook:
	case <-time.After(30 * time.Second):
		require.Fail(t, "no scheduled purge within 30s")
	}
	require.NoError(t, r.Stop(ctx))
	require.NoError(t, info.Err)
	require.Equal(t, int64(1), info.Processed)
	require.Equal(t, int64(1), info.Keys, "old's row; failed keeps its own")
	require.Equal(t, []string{"failed"}, keyRows(t, db))

	mgr := outbox.NewManager(database, outbox.ManagerConfig{})
	n, err := mgr.PruneKeys(ctx, 1, nil)
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = db.Exec("DELETE FROM `outbox_events` WHERE `id` = ?", failed)
	require.NoError(t, err)
	n, err = mgr.PruneKeys(ctx, 1, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Empty(t, keyRows(t, db))
}

// An ordered relay on MySQL/MariaDB prunes outbox_keys on schedule even
// without a purge, so the table stays bounded under --retention delete.
func TestMySQLOrderedRelayPrunesKeysWithoutPurge(t *testing.T) {
	t.Parallel()
	ctx, db, _, w := mysqlKeysSetup(t)
	for _, key := range []string{"a", "b", "c"} {
		_, err := w.WriteSQL(ctx, db, outbox.Message{EventType: "e", AggregateType: "order", AggregateID: key, Payload: key})
		require.NoError(t, err)
	}
	_, err := db.Exec("UPDATE `outbox_events` SET `status` = 'processed', `processed_at` = UTC_TIMESTAMP(6)")
	require.NoError(t, err)
	hook := make(purgeHook, 1)
	r, err := outbox.NewRelay(outbox.MySQL(db), outbox.RelayConfig{Sink: outbox.SinkFunc(func(context.Context, []outbox.Event) []error { return nil }),
		Ordering: outbox.OrderingAggregate, Retention: outbox.RetainDelete, PollInterval: time.Hour, Hooks: []outbox.Hook{hook}})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	var info outbox.PurgeInfo
	select {
	case info = <-hook:
	case <-time.After(30 * time.Second):
		require.Fail(t, "no scheduled key pruning within 30s")
	}
	require.NoError(t, r.Stop(ctx))
	require.NoError(t, info.Err)
	require.Equal(t, int64(3), info.Keys)
	require.Zero(t, info.Processed, "no purge configured")
	require.Empty(t, keyRows(t, db))
}
