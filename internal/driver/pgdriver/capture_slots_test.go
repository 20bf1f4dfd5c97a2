package pgdriver_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
)

// ReplicationSlots lists nothing before capture was set up, keeps a
// recorded slot the server does not have (exists false) with its lease
// row, and answers a role that may not read outbox_capture with Denied,
// not an error. The slots themselves need wal_level = logical: outboxcdc's
// and the CLI's tests cover them on a private cluster.
func TestReplicationSlotsRecordedMissingAndDenied(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got, err := b.drv.ReplicationSlots(b.ctx)
	require.NoError(t, err)
	require.Empty(t, got.Slots, "no outbox_capture: capture never set up")
	require.Empty(t, got.Denied)

	require.NoError(t, b.drv.EnsureCaptureTable(b.ctx))
	slot := "outbox_" + b.schema + "_gone"
	_, err = b.pool.Exec(b.ctx, `INSERT INTO `+pgx.Identifier{b.schema, "outbox_capture"}.Sanitize()+` (slot_name, snapshot) VALUES ($1, pg_current_snapshot())`, slot)
	require.NoError(t, err)
	require.NoError(t, b.drv.HoldCapture(b.ctx, slot, "relay-a", time.Minute))
	got, err = b.drv.ReplicationSlots(b.ctx)
	require.NoError(t, err)
	require.Len(t, got.Slots, 1)
	s := got.Slots[0]
	require.Equal(t, slot, s.Name)
	require.False(t, s.Exists, "recorded, not on the server")
	require.False(t, s.Active)
	require.Nil(t, s.RetainedBytes)
	require.Nil(t, s.ActivePID)
	require.Equal(t, "relay-a", s.Holder)
	require.False(t, s.HolderExpired)
	require.WithinDuration(t, time.Now().Add(time.Minute), s.HolderUntil, 30*time.Second)

	// A role with the outbox's own rights but none on outbox_capture.
	role := b.schema + "_reader"
	pool := testutil.RolePool(t, b.pool, role,
		`GRANT USAGE ON SCHEMA `+pgx.Identifier{b.schema}.Sanitize()+` TO `+pgx.Identifier{role}.Sanitize())
	got, err = pgdriver.New(pool, b.schema).ReplicationSlots(b.ctx)
	require.NoError(t, err, "a refusal is reported, not an error")
	require.Empty(t, got.Slots)
	require.Contains(t, got.Denied, "permission denied")
	require.Contains(t, got.Denied, "grant the role SELECT on outbox_capture")
}
