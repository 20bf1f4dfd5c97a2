package outboxadmin_test

import (
	"context"
	"testing"

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
			out := make([]outboxadmin.ConsumerLagJSON, len(lags))
			for i, l := range lags {
				out[i] = outboxadmin.ConsumerLagJSON{Consumer: l.Consumer, Unprocessed: l.Unprocessed,
					OldestUnprocessedAgeSeconds: l.OldestUnprocessedAge.Seconds()}
			}
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

	// No inbox configured.
	var none outboxadmin.ConsumersJSON
	setup(t).getJSON(t, "/api/consumers", &none)
	require.Equal(t, outboxadmin.ConsumersJSON{Consumers: []outboxadmin.ConsumerLagJSON{}}, none)
}
