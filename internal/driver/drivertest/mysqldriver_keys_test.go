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
)

func mysqlKeysSetup(t *testing.T) (context.Context, *sql.DB, *sqldriver.Driver, *outbox.Writer) {
	t.Helper()
	ctx := context.Background()
	_, db := drivertest.MySQLDatabase(t)
	drv := mysqldriver.New(db, "")
	_, err := drv.Migrate(ctx)
	require.NoError(t, err)
	return ctx, db, drv, outbox.NewWriter(outbox.WriterConfig{Dialect: outbox.DialectMariaDB})
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
	require.Equal(t, keys*(perKey/5), restarted, "every key restarted at 1 after each wait for a prune")
}
