package outboxadmin_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/outboxadmin"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// GET /api/consumers lists the inbox's consumers with unprocessed
// messages, the most lagging first, from Config.Consumers; without it the
// endpoint says there is no inbox.
func TestConsumers(t *testing.T) {
	t.Parallel()
	var b *bundle
	b = setup(t, func(c *outboxadmin.Config) {
		c.Consumers = func(ctx context.Context) ([]outboxadmin.ConsumerLagJSON, error) {
			lags, err := inbox.Lag(ctx, outbox.Postgres(b.pool), b.schema)
			if err != nil {
				return nil, err
			}
			reports, err := inbox.BrokerReports(ctx, outbox.Postgres(b.pool), b.schema)
			if err != nil {
				return nil, err
			}
			out := outboxadmin.NewConsumerLagsJSON(lags, reports)
			return out, nil
		}
	})
	_, err := outboxmigrate.MigrateInbox(b.ctx, outbox.Postgres(b.pool), outboxmigrate.Config{Schema: b.schema})
	require.NoError(t, err)

	var res outboxadmin.ConsumersJSON
	b.getJSON(t, "/api/consumers", &res)
	require.Equal(t, outboxadmin.ConsumersJSON{Available: true, Consumers: []outboxadmin.ConsumerLagJSON{}}, res)

	b.exec(t, `INSERT INTO `+pgx.Identifier{b.schema, "inbox_messages"}.Sanitize()+` (consumer, message_id, payload, received_at, processed_at) VALUES
  ('billing', '1', '{}', now() - interval '30 seconds', NULL),
  ('billing', '2', '{}', now(), NULL),
  ('audit', '1', '{}', now() - interval '300 seconds', NULL),
  ('mail', '1', '{}', now() - interval '900 seconds', now())`)
	b.getJSON(t, "/api/consumers", &res)
	require.True(t, res.Available)
	require.Len(t, res.Consumers, 2, "mail processed everything")
	require.Equal(t, "audit", res.Consumers[0].Consumer, "the most lagging first")
	require.Equal(t, int64(1), res.Consumers[0].Unprocessed)
	require.InDelta(t, 300, res.Consumers[0].OldestUnprocessedAgeSeconds, 20)
	require.Equal(t, "billing", res.Consumers[1].Consumer)
	require.Equal(t, int64(2), res.Consumers[1].Unprocessed)
	require.InDelta(t, 30, res.Consumers[1].OldestUnprocessedAgeSeconds, 20)
	require.Nil(t, res.Consumers[0].BrokerPending, "no broker report")

	// The receivers' broker reports: billing's is current and joins its
	// backlog; mail has no backlog and is listed for its report, which
	// is stale (older than three of its 5 s intervals).
	db := outbox.Postgres(b.pool)
	require.NoError(t, inbox.ReportBroker(b.ctx, db, b.schema, inbox.BrokerReport{Consumer: "billing", Broker: "nats", Pending: 12, Interval: 5 * time.Second}))
	require.NoError(t, inbox.ReportBroker(b.ctx, db, b.schema, inbox.BrokerReport{Consumer: "mail", Broker: "kafka", Pending: 3, Interval: 5 * time.Second}))
	b.exec(t, `UPDATE `+pgx.Identifier{b.schema, "inbox_consumers"}.Sanitize()+` SET reported_at = now() - interval '60 seconds' WHERE consumer = 'mail'`)
	var raw struct{ Consumers []map[string]any }
	b.getJSON(t, "/api/consumers", &raw)
	require.Len(t, raw.Consumers, 3)
	require.Equal(t, map[string]any{"consumer": "audit", "unprocessed": float64(1), "oldest_unprocessed_age_seconds": raw.Consumers[0]["oldest_unprocessed_age_seconds"]},
		raw.Consumers[0], "no broker fields without a report")
	billing, mail := raw.Consumers[1], raw.Consumers[2]
	require.Equal(t, "billing", billing["consumer"])
	require.Equal(t, "nats", billing["broker"])
	require.Equal(t, float64(12), billing["broker_pending"])
	require.Less(t, billing["broker_reported_age_seconds"], float64(5))
	require.Equal(t, false, billing["broker_pending_stale"])
	require.Equal(t, "mail", mail["consumer"])
	require.Equal(t, float64(0), mail["unprocessed"])
	require.Equal(t, "kafka", mail["broker"])
	require.Equal(t, float64(3), mail["broker_pending"])
	require.InDelta(t, 60, mail["broker_reported_age_seconds"], 10)
	require.Equal(t, true, mail["broker_pending_stale"])

	// No inbox configured.
	var none outboxadmin.ConsumersJSON
	setup(t).getJSON(t, "/api/consumers", &none)
	require.Equal(t, outboxadmin.ConsumersJSON{Consumers: []outboxadmin.ConsumerLagJSON{}}, none)
}
