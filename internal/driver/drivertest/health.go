package drivertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
)

// testTableHealth checks what every database reports alike: both tables in
// order, no negative figure, and ErrNoTable before the migration. What each
// database can tell (dead tuples, the horizon, free pages) is tested in its
// driver's package, against situations made for it.
func testTableHealth(t *testing.T, h Harness) {
	b := setup(t, h)
	b.insert(t, 3)
	health, err := b.mgr.TableHealth(b.ctx)
	require.NoError(t, err)
	require.Len(t, health.Tables, 2)
	require.Equal(t, driver.TableEvents, health.Tables[0].Table)
	require.Equal(t, driver.TableArchive, health.Tables[1].Table)
	for _, tb := range health.Tables {
		for _, n := range []*int64{tb.LiveRows, tb.DeadTuples, tb.Bytes, tb.FreeBytes} {
			if n != nil {
				require.GreaterOrEqual(t, *n, int64(0), "%+v", tb)
			}
		}
	}
	if hz := health.Horizon; hz != nil {
		require.GreaterOrEqual(t, hz.Age, time.Duration(0))
		if hz.Holder != nil {
			require.Contains(t, []outbox.HorizonKind{outbox.HorizonSession, outbox.HorizonPreparedTransaction, outbox.HorizonReplicationSlot}, hz.Holder.Kind)
		}
	}
	if f := health.File; f != nil {
		require.Positive(t, f.Bytes)
		require.LessOrEqual(t, f.FreeBytes, f.Bytes)
	}
	// Each database reports its own kind of figures, and at least one.
	require.True(t, health.Tables[0].Bytes != nil || health.File != nil, "no size at all: %+v", health)

	empty := h.Open(t, true)
	_, err = outbox.NewManager(empty.Database, outbox.ManagerConfig{Schema: empty.Schema}).TableHealth(b.ctx)
	require.ErrorIs(t, err, outbox.ErrNoTable)
}
