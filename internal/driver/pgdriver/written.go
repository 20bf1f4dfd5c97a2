package pgdriver

import "github.com/outboxkit/outbox/internal/driver"

// WrittenQueries returns outboxtest's reads of the outbox table in schema.
// The event_type filter uses no index (the table's indexes serve the
// relay); a test's table is small.
func WrittenQueries(schema string) driver.Written {
	t := quoteIdent(schema) + "." + quoteIdent("outbox_events")
	return driver.Written{
		ByType: `SELECT id, event_type, coalesce(aggregate_type, ''), coalesce(aggregate_id, ''), payload::text, headers::text,
    coalesce(idempotency_key, ''), status
FROM ` + t + ` WHERE event_type = $1 ORDER BY id`,
		Types: `SELECT event_type, count(*) FROM ` + t + ` GROUP BY event_type ORDER BY event_type`,
	}
}
