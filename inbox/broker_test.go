package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
)

// ReportBroker keeps one row per consumer in inbox_consumers, replaced on
// each report; BrokerReports ages it by the database clock and calls it
// stale past three poll intervals.
func TestBrokerReports(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, inbox.Config{})
	db := outbox.Postgres(b.pool)
	reports, err := inbox.BrokerReports(ctx, db, b.schema)
	require.NoError(t, err)
	require.Empty(t, reports)

	require.NoError(t, inbox.ReportBroker(ctx, db, b.schema, inbox.BrokerReport{Consumer: "billing", Broker: "nats", Pending: 9, Interval: 5 * time.Second}))
	require.NoError(t, inbox.ReportBroker(ctx, db, b.schema, inbox.BrokerReport{Consumer: "billing", Broker: "nats", Pending: 4, Interval: 5 * time.Second}))
	reports, err = inbox.BrokerReports(ctx, db, b.schema)
	require.NoError(t, err)
	require.Len(t, reports, 1)
	require.Equal(t, "billing", reports[0].Consumer)
	require.Equal(t, "nats", reports[0].Broker)
	require.Equal(t, int64(4), reports[0].Pending)
	require.Equal(t, 5*time.Second, reports[0].Interval)
	require.Less(t, reports[0].Age, 5*time.Second)
	require.False(t, reports[0].Stale())

	_, err = b.pool.Exec(ctx, `UPDATE `+pgx.Identifier{b.schema, "inbox_consumers"}.Sanitize()+` SET reported_at = now() - interval '16 seconds'`)
	require.NoError(t, err)
	reports, err = inbox.BrokerReports(ctx, db, b.schema)
	require.NoError(t, err)
	require.InDelta(t, 16, reports[0].Age.Seconds(), 5)
	require.True(t, reports[0].Stale())

	err = inbox.ReportBroker(ctx, db, b.schema, inbox.BrokerReport{Consumer: "", Broker: "nats", Interval: time.Second})
	var ce *outbox.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "Consumer", ce.Field)
	err = inbox.ReportBroker(ctx, db, b.schema, inbox.BrokerReport{Consumer: "billing", Broker: "nats"})
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "Interval", ce.Field)

	// An inbox before migration 002.
	_, err = b.pool.Exec(ctx, `DROP TABLE `+pgx.Identifier{b.schema, "inbox_consumers"}.Sanitize())
	require.NoError(t, err)
	reports, err = inbox.BrokerReports(ctx, db, b.schema)
	require.NoError(t, err)
	require.Nil(t, reports)
	err = inbox.ReportBroker(ctx, db, b.schema, inbox.BrokerReport{Consumer: "billing", Broker: "nats", Pending: 1, Interval: time.Second})
	require.ErrorIs(t, err, inbox.ErrNoTable)
	require.ErrorContains(t, err, "run outbox migrate --inbox")
}
