package drivertest_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/internal/driver/mysqldriver"
	"github.com/outboxkit/outbox/internal/testutil"
)

// Two transactions on one key commit out of ID order: T2's one INSERT of
// (b, a) takes its IDs at its first row, then waits on key a's row, which T1
// holds; T1 writes a again, with a higher ID, and commits; T2 then numbers
// its a after T1's. The relay follows commit order (key_seq), not IDs:
// T1's two events first, then T2's, though T2's has the lower ID of the
// last two.
func TestMySQLOrderedOutOfIDOrderCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, db := drivertest.MySQLDatabase(t)
	drv := mysqldriver.New(db, "")
	_, err := drv.Migrate(ctx)
	require.NoError(t, err)
	require.NoError(t, drv.PrepareOrdering(ctx))
	w := outbox.NewWriter(outbox.WriterConfig{Dialect: outbox.DialectMariaDB})
	msg := func(key string) outbox.Message {
		return outbox.Message{EventType: "e", AggregateType: "order", AggregateID: key, Payload: key}
	}

	t1, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = t1.Rollback() }()
	first, err := w.WriteSQL(ctx, t1, msg("a"))
	require.NoError(t, err)

	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	var t2ID int64
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&t2ID))
	t2, err := conn.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = t2.Rollback() }()
	type result struct {
		ids []int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := w.WriteSQL(ctx, t2, msg("b"), msg("a"))
		if err == nil {
			err = t2.Commit()
		}
		done <- result{res.IDs, err}
	}()
	var r result
	testutil.WaitFor(t, 10*time.Second, "T2 waits on key a's row", func() bool {
		select {
		case r = <-done:
			require.Failf(t, "T2 did not wait for T1", "ids %v, err %v", r.ids, r.err)
		default:
		}
		// The trigger's upsert of a's row, a second in: waiting on T1.
		// (INNODB_TRX did not list T2 while it waited, on MariaDB 10.11
		// under load; the process list does.)
		var n int
		require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.PROCESSLIST
WHERE ID = ? AND INFO LIKE 'INSERT INTO `+"`outbox_keys`"+`%' AND TIME >= 1`, t2ID).Scan(&n))
		return n == 1
	})
	second, err := w.WriteSQL(ctx, t1, msg("a"))
	require.NoError(t, err)
	require.NoError(t, t1.Commit())
	r = <-done
	require.NoError(t, r.err)
	late := r.ids[1]
	require.Less(t, late, second.IDs[0], "T2's event of a has the lower ID but committed last")

	claim := func() driver.Claim {
		c, err := drv.ClaimOrdered(ctx, driver.OrderedClaimParams{RelayID: "r", BatchSize: 100, Lease: time.Minute})
		require.NoError(t, err)
		return c
	}
	var ids []int64
	for _, e := range claim().Events {
		if e.AggregateID == "a" {
			ids = append(ids, e.ID)
		}
	}
	require.Equal(t, []int64{first.IDs[0], second.IDs[0], late}, ids, "key a in commit order")
	require.Empty(t, claim().Events, "every key in flight")
	requireKeySeqs(t, db, map[int64]int64{first.IDs[0]: 1, second.IDs[0]: 2, late: 3, r.ids[0]: 1})
}

func requireKeySeqs(t *testing.T, db *sql.DB, want map[int64]int64) {
	t.Helper()
	got := map[int64]int64{}
	rows, err := db.Query("SELECT `id`, `key_seq` FROM `outbox_events`")
	require.NoError(t, err)
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var id, seq int64
		require.NoError(t, rows.Scan(&id, &seq))
		got[id] = seq
	}
	require.NoError(t, rows.Err())
	require.Equal(t, want, got)
}
