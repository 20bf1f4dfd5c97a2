package sqldriver

import "github.com/outboxkit/outbox/internal/driver"

// WrittenQueries returns outboxtest's reads of the outbox table in schema
// on database d (for MySQL, the connection's database for "" and "public").
func WrittenQueries(d Dialect, schema string) driver.Written {
	t := d.Table(schema, "outbox_events")
	return driver.Written{
		ByType: `SELECT id, event_type, coalesce(aggregate_type, ''), coalesce(aggregate_id, ''), payload, headers,
    coalesce(idempotency_key, ''), status
FROM ` + t + ` WHERE event_type = ? ORDER BY id`,
		Types: `SELECT event_type, count(*) FROM ` + t + ` GROUP BY event_type ORDER BY event_type`,
	}
}
