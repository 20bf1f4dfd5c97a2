package outboxprom

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxmigrate"
)

func TestInboxMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.Pool(t)
	schema := testutil.EmptySchemaName(t)
	db := outbox.Postgres(pool)
	_, err := outboxmigrate.MigrateInbox(ctx, db, outboxmigrate.Config{Schema: schema})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	m, err := NewInbox(InboxConfig{Registerer: reg, Database: db, Schema: schema, Consumers: []string{"audit"}})
	require.NoError(t, err)
	in, err := inbox.New(inbox.Config{Schema: schema, Consumer: "mailer", Hooks: []inbox.Hook{m}})
	require.NoError(t, err)

	fams := families(t, reg)
	require.Zero(t, series(fams, "outbox_consumer_lag_seconds", map[string]string{"consumer": "audit", "schema": schema}).GetGauge().GetValue())
	require.Equal(t, 1.0, series(fams, "outbox_inbox_lag_query_ok", nil).GetGauge().GetValue())

	msg := inbox.Message{Source: "/outbox", ID: "1", Payload: []byte(`{}`), Time: time.Now().Add(-2 * time.Second)}
	for range 3 {
		_, err := in.Store(ctx, pool, msg)
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `UPDATE `+testutilInbox(schema)+` SET received_at = now() - interval '90 seconds'`)
	require.NoError(t, err)

	fams = families(t, reg)
	mailer := map[string]string{"consumer": "mailer"}
	require.Equal(t, 1.0, series(fams, "outbox_inbox_received_total", mailer).GetCounter().GetValue())
	require.Equal(t, 2.0, series(fams, "outbox_inbox_duplicates_total", mailer).GetCounter().GetValue())
	require.Equal(t, uint64(1), series(fams, "outbox_inbox_receive_delay_seconds", mailer).GetHistogram().GetSampleCount())
	require.GreaterOrEqual(t, series(fams, "outbox_inbox_receive_delay_seconds", mailer).GetHistogram().GetSampleSum(), 2.0)
	require.InDelta(t, 90, series(fams, "outbox_consumer_lag_seconds", mailer).GetGauge().GetValue(), 10)
	require.Equal(t, 1.0, series(fams, "outbox_inbox_unprocessed", mailer).GetGauge().GetValue())

	_, err = NewInbox(InboxConfig{Registerer: reg, Schema: schema})
	require.ErrorContains(t, err, "already registered")
}

func testutilInbox(schema string) string { return `"` + schema + `".inbox_messages` }
