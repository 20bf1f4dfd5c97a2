package main_test

import (
	"context"
	"crypto/rand"
	binpkg "encoding/binary"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
)

// TestRelayJetStreamDedupAcrossCrash kills a relay after JetStream stored
// its batch and before the database marked it, then lets a second relay
// publish the same events again once the lease expired: JetStream's
// duplicate window drops the re-publishes (Nats-Msg-Id = event ID), so the
// stream holds each event once while the table ends with all processed.
func TestRelayJetStreamDedupAcrossCrash(t *testing.T) {
	t.Parallel()
	b := setup(t)
	js := natsStream(t)
	const n = 20
	ids := b.writeOrders(t, n)

	// Marks wait for an advisory lock the test holds: a trigger takes it
	// on every update that sets an event processed. Claims (to processing)
	// and lease rescues (to pending) pass.
	var kb [8]byte
	_, _ = rand.Read(kb[:])
	lockKey := int64(binpkg.LittleEndian.Uint64(kb[:]) >> 1)
	fn := pgx.Identifier{b.schema, "block_marks"}.Sanitize()
	b.exec(t, fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.status = 'processed' THEN PERFORM pg_advisory_xact_lock(%d); END IF;
	RETURN NEW;
END $$`, fn, lockKey))
	b.exec(t, `CREATE TRIGGER block_marks BEFORE UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION `+fn+`()`)
	lockConn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer lockConn.Release()
	lockTx, err := lockConn.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = lockTx.Rollback(context.Background()) }()
	_, err = lockTx.Exec(b.ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey)
	require.NoError(t, err)

	suffix := b.schema[len(b.schema)-8:]
	relayArgs := func(id string) []string {
		return []string{"--database-url", testutil.DatabaseURL(), "--schema", b.schema, "relay",
			"--sink", "nats://" + natsAddr() + "?stream=" + js.stream, "--route", js.prefix + ".{event_type}",
			"--relay-id", id, "--batch-size", "100", "--lease", "3s", "--sink-timeout", "2s",
			"--poll-interval", "50ms", "--log-level", "warn"}
	}

	// The first relay publishes the whole batch and blocks marking it.
	doomed := "doomed-" + suffix
	first := start(t, nil, relayArgs(doomed)...)
	testutil.WaitFor(t, 30*time.Second, "the stream storing the batch", func() bool {
		require.False(t, first.exited(), "relay exited early; stderr:\n%s", first.stderr.String())
		return js.count(t) == n
	})
	testutil.WaitFor(t, 30*time.Second, "the relay's mark waiting for the lock", func() bool {
		var waiting int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock' AND wait_event = 'advisory'`,
			"outbox-relay:"+doomed).Scan(&waiting))
		return waiting > 0
	})
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	<-first.done
	// The dead relay's backend still waits in its mark; end it so the mark
	// never commits once the lock is free.
	testutil.WaitFor(t, 30*time.Second, "the killed relay's connections gone", func() bool {
		var left int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM (
			SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1) t`,
			"outbox-relay:"+doomed).Scan(&left))
		return left == 0
	})
	require.NoError(t, lockTx.Rollback(b.ctx))
	s := b.stats(t)
	require.EqualValues(t, n, s.Processing, "published, never marked")
	require.Zero(t, s.Processed)

	// The second relay takes the events over when the lease expires and
	// publishes every one of them again.
	survivor := "survivor-" + suffix
	second := start(t, nil, relayArgs(survivor)...)
	testutil.WaitFor(t, 60*time.Second, "every event processed", func() bool {
		require.False(t, second.exited(), "relay exited; stderr:\n%s", second.stderr.String())
		return b.stats(t).Processed == n
	})
	require.Equal(t, 0, second.stop(t, syscall.SIGTERM), "stderr:\n%s", second.stderr.String())

	s = b.stats(t)
	require.Zero(t, s.Pending+s.Processing+s.Failed)
	for _, id := range ids {
		e := b.event(t, id)
		require.Equal(t, survivor, e.LockedBy, "event %d re-published and marked by the second relay", id)
		require.Equal(t, 1, e.Attempts, "the lease expiry counts as an attempt")
		require.Equal(t, 1, e.LeaseExpiries)
	}
	require.EqualValues(t, n, js.count(t), "JetStream dropped the re-published events")
	b.requireDelivered(t, ids, js.messages(t))
}
