package pgdriver

import (
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outbox/internal/driver"
)

// Insert is the writer's statement for one schema: a batch of events in one
// round trip, inside the caller's transaction.
type Insert struct {
	SQL string
	// SQLNotify is SQL that also notifies NotifyChannel with the schema
	// as payload, delivered when the transaction commits; its last two
	// arguments are NotifyArgs.
	SQLNotify string
	schema    string
}

// NewInsert builds the insert statement for the outbox table in schema.
func NewInsert(schema string) Insert {
	table := quoteIdent(schema) + "." + quoteIdent("outbox_events")
	seq := quoteIdent(schema) + "." + quoteIdent("outbox_events_id_seq")
	// IDs come from the sequence before the insert so each returned ID can be
	// mapped back to its message's position (RETURNING has no order, and a
	// skipped duplicate returns nothing). A duplicate idempotency key is
	// skipped by ON CONFLICT DO NOTHING, so the caller's transaction is never
	// aborted by a unique violation.
	sqlText := `WITH input AS MATERIALIZED (
    SELECT nextval('` + strings.ReplaceAll(seq, "'", "''") + `'::regclass) AS id, m.*
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                $7::int4[], $8::int8[], $9::timestamptz[])
         WITH ORDINALITY AS m(event_type, aggregate_type, aggregate_id, payload, headers,
                              idempotency_key, max_attempts, delay_ms, available_at, ord)
), inserted AS (
    INSERT INTO ` + table + ` (id, event_type, aggregate_type, aggregate_id, payload, headers,
                               idempotency_key, max_attempts, available_at)
    SELECT id, event_type, nullif(aggregate_type, ''), nullif(aggregate_id, ''),
           payload::jsonb, headers::jsonb, nullif(idempotency_key, ''), nullif(max_attempts, 0),
           coalesce(available_at, now() + delay_ms * interval '1 millisecond')
    FROM input
    ORDER BY ord
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id
)
SELECT input.ord, input.id FROM input JOIN inserted USING (id)`
	// The notification rides in the same statement: no extra round trip.
	// A MATERIALIZED CTE that the final SELECT references runs exactly once.
	notify := strings.Replace(sqlText, "), inserted AS (", `), woke AS MATERIALIZED (
    SELECT pg_notify($10, $11)
), inserted AS (`, 1)
	notify = strings.Replace(notify, "SELECT input.ord, input.id FROM input JOIN inserted USING (id)",
		"SELECT input.ord, input.id FROM input JOIN inserted USING (id) CROSS JOIN woke", 1)
	return Insert{SQL: sqlText, SQLNotify: notify, schema: schema}
}

// NotifyArgs returns the two trailing arguments of SQLNotify.
func (i Insert) NotifyArgs() []any { return []any{NotifyChannel, i.schema} }

// Args returns the statement's arguments for events.
func (Insert) Args(events []driver.NewEvent) []any {
	n := len(events)
	var (
		eventTypes = make([]string, n)
		aggTypes   = make([]string, n)
		aggIDs     = make([]string, n)
		payloads   = make([]string, n)
		headers    = make([]string, n)
		keys       = make([]string, n)
		maxAtt     = make([]int32, n)
		delays     = make([]int64, n)
		availables = make([]pgtype.Timestamptz, n)
	)
	for i, e := range events {
		eventTypes[i] = e.EventType
		aggTypes[i] = e.AggregateType
		aggIDs[i] = e.AggregateID
		payloads[i] = string(e.Payload)
		headers[i] = string(e.Headers)
		keys[i] = e.IdempotencyKey
		maxAtt[i] = int32(e.MaxAttempts)
		delays[i] = e.Delay.Milliseconds()
		if !e.AvailableAt.IsZero() {
			availables[i] = pgtype.Timestamptz{Time: e.AvailableAt, Valid: true}
		}
	}
	return []any{eventTypes, aggTypes, aggIDs, payloads, headers, keys, maxAtt, delays, availables}
}
