package drivertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/internal/driver/mysqldriver"
)

func TestTableHealthOldestTransactionHoldsPurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, db := drivertest.MySQLDatabase(t)
	drv := mysqldriver.New(db, "")
	_, err := drv.Migrate(ctx)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "INSERT INTO `outbox_events` (`event_type`, `payload`) VALUES ('e', '{}'), ('e', '{}'), ('e', '{}')")
	require.NoError(t, err)

	// A connection holding a read view, as a report in REPEATABLE READ
	// (MySQL's default) does between its statements.
	holder, err := db.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close() })
	_, err = holder.ExecContext(ctx, `START TRANSACTION WITH CONSISTENT SNAPSHOT`)
	require.NoError(t, err)
	var id int64
	require.NoError(t, holder.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&id))
	opened := time.Now()
	// Committed after the read view: purge may not remove their undo.
	for range 5 {
		_, err = db.ExecContext(ctx, "UPDATE `outbox_events` SET `attempts` = `attempts` + 1")
		require.NoError(t, err)
	}

	// The server is shared with other tests, whose short transactions
	// may be older than this one for a moment.
	var h driver.TableHealth
	waitTrx(t, 30*time.Second, "the read view to be the oldest transaction, a second old", func() bool {
		h, err = drv.TableHealth(ctx)
		require.NoError(t, err)
		require.NotNil(t, h.Horizon)
		return h.Horizon.Holder != nil && h.Horizon.Holder.PID == id && time.Since(opened) > time.Second
	})
	hz := h.Horizon
	require.Equal(t, driver.HorizonHolder{Kind: driver.HorizonSession, PID: id, User: "root",
		Client: hz.Holder.Client, State: "Sleep"}, *hz.Holder)
	require.NotEmpty(t, hz.Holder.Client)
	require.GreaterOrEqual(t, hz.Age, time.Second)
	require.Less(t, hz.Age, time.Minute, "trx_started and NOW() in one time zone")
	require.Nil(t, hz.XIDAge)
	require.NotNil(t, h.HistoryLength)
	require.GreaterOrEqual(t, *h.HistoryLength, int64(5))

	require.Len(t, h.Tables, 2)
	for i, name := range []string{driver.TableEvents, driver.TableArchive} {
		tb := h.Tables[i]
		require.Equal(t, name, tb.Table)
		require.NotNil(t, tb.LiveRows)
		require.NotNil(t, tb.FreeBytes)
		require.NotNil(t, tb.Bytes)
		require.Positive(t, *tb.Bytes, "InnoDB allocates pages for the clustered and secondary indexes")
		require.Nil(t, tb.DeadTuples)
		require.Nil(t, tb.Vacuum)
	}
	require.Nil(t, h.File)

	_, err = holder.ExecContext(ctx, `COMMIT`)
	require.NoError(t, err)
	waitTrx(t, 10*time.Second, "the committed transaction to leave the horizon", func() bool {
		h, err = drv.TableHealth(ctx)
		require.NoError(t, err)
		return h.Horizon.Holder == nil || h.Horizon.Holder.PID != id
	})
}

func TestTableHealthWithoutTable(t *testing.T) {
	t.Parallel()
	_, db := drivertest.MySQLDatabase(t)
	_, err := mysqldriver.New(db, "").TableHealth(context.Background())
	require.ErrorIs(t, err, driver.ErrNoTable)
}

// waitTrx polls cond until it is true or timeout passes, reading no more
// often than INNODB_TRX refreshes: its copy of the transaction list is
// renewed only when nobody read it for 100ms.
func waitTrx(t *testing.T, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, msg)
		}
		time.Sleep(150 * time.Millisecond)
	}
}
