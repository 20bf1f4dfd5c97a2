package driver

// Written holds the two reads outboxtest runs inside a caller's still-open
// transaction, so it sees the events that transaction wrote before they
// commit. Both are plain SELECTs without locks: they neither block the
// relay nor hold anything once the caller's transaction ends.
type Written struct {
	// ByType returns id, event_type, aggregate_type, aggregate_id, payload
	// and headers (both as JSON text), idempotency_key and status of the
	// events of one type (the one bound parameter), in ID order.
	ByType string
	// Types returns each event type in the table with its count, for a
	// failure message that says what was written instead.
	Types string
}
