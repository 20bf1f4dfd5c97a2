package outbox_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

func TestPurgeTrimsProcessedAndArchive(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	b.write(t, 4, nil)
	rec := outboxtest.NewRecorder()
	b.start(t, outbox.RelayConfig{Sink: rec, Retention: outbox.RetainArchive})
	rec.WaitLen(t, 4, 10*time.Second)
	b.waitStats(t, "archived", func(s outbox.Stats) bool { return s.Pending+s.Processing == 0 })
	// Two more kept as processed rows in the main table.
	ids := b.write(t, 2, nil)
	_, err := b.pool.Exec(b.ctx, `UPDATE `+testutil.Table(b.schema)+` SET status = 'processed', processed_at = now() - interval '3 days' WHERE id = ANY($1)`, ids)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE `+pgx.Identifier{b.schema, "outbox_events_archive"}.Sanitize()+` SET processed_at = now() - interval '3 days'`)
	require.NoError(t, err)

	var progress []int64
	n, err := b.mgr.Purge(b.ctx, outbox.PurgeParams{OlderThan: 48 * time.Hour, BatchSize: 3}, func(done int64) { progress = append(progress, done) })
	require.NoError(t, err)
	require.EqualValues(t, 6, n)
	require.Equal(t, int64(6), progress[len(progress)-1])

	_, err = b.mgr.Purge(b.ctx, outbox.PurgeParams{Status: outbox.StatusPending, OlderThan: time.Hour}, nil)
	require.ErrorContains(t, err, "cannot be purged")
	_, err = b.mgr.Purge(b.ctx, outbox.PurgeParams{}, nil)
	require.ErrorContains(t, err, "older-than")
}
