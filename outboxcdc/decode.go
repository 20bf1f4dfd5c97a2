package outboxcdc

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
)

// relation maps the outbox table's columns, as the stream's relation
// message lists them, to their positions in an insert's tuple.
type relation struct {
	id, eventType, aggregateType, aggregateID, payload, headers, idempotencyKey int
	status, maxAttempts, availableAt, createdAt, updatedAt, txid                int
}

func newRelation(m *pglogrepl.RelationMessage) *relation {
	r := &relation{-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}
	for i, c := range m.Columns {
		switch c.Name {
		case "id":
			r.id = i
		case "event_type":
			r.eventType = i
		case "aggregate_type":
			r.aggregateType = i
		case "aggregate_id":
			r.aggregateID = i
		case "payload":
			r.payload = i
		case "headers":
			r.headers = i
		case "idempotency_key":
			r.idempotencyKey = i
		case "status":
			r.status = i
		case "max_attempts":
			r.maxAttempts = i
		case "available_at":
			r.availableAt = i
		case "created_at":
			r.createdAt = i
		case "updated_at":
			r.updatedAt = i
		case "txid":
			r.txid = i
		}
	}
	return r
}

// timestampLayout is timestamptz's text form with DateStyle ISO in UTC.
const timestampLayout = "2006-01-02 15:04:05.999999-07"

// decode reads an inserted row. ok is false for a row the stream leaves
// to the table path (the stream does not settle it): not pending, delayed, or
// already changed; and for a row whose event type matches none of types
// (when not empty), left to the relays serving that type.
//
// txid is the writing transaction's ID (the txid column): the settler
// waits until it is visible before it marks the row.
func (r *relation) decode(t *pglogrepl.TupleData, types []string) (ev outbox.Event, txid uint64, ok bool, err error) {
	if t == nil {
		return ev, txid, false, fmt.Errorf("insert without a tuple")
	}
	col := func(i int) (string, bool) {
		if i < 0 || i >= len(t.Columns) {
			return "", false
		}
		c := t.Columns[i]
		if c.DataType != pglogrepl.TupleDataTypeText {
			return "", false
		}
		return string(c.Data), true
	}
	status, _ := col(r.status)
	if status != "pending" {
		return ev, txid, false, nil
	}
	if typ, _ := col(r.eventType); len(types) > 0 && !matchAnyType(types, typ) {
		return ev, txid, false, nil // another relay's: read nothing else of it
	}
	id, _ := col(r.id)
	if ev.ID, err = strconv.ParseInt(id, 10, 64); err != nil {
		return ev, txid, false, fmt.Errorf("id %q: %w", id, err)
	}
	x, _ := col(r.txid)
	if txid, err = strconv.ParseUint(x, 10, 64); err != nil {
		return ev, txid, false, fmt.Errorf("txid %q: %w (outbox migrate: the table needs migration 7)", x, err)
	}
	created, ok1 := col(r.createdAt)
	updated, ok2 := col(r.updatedAt)
	avail, ok3 := col(r.availableAt)
	if !ok1 || !ok2 || !ok3 {
		return ev, txid, false, fmt.Errorf("insert lacks created_at, updated_at or available_at")
	}
	if updated != created {
		return ev, txid, false, nil
	}
	if ev.CreatedAt, err = time.Parse(timestampLayout, created); err != nil {
		return ev, txid, false, fmt.Errorf("created_at %q: %w", created, err)
	}
	if avail != created {
		if ev.AvailableAt, err = time.Parse(timestampLayout, avail); err != nil {
			return ev, txid, false, fmt.Errorf("available_at %q: %w", avail, err)
		}
		if ev.AvailableAt.After(ev.CreatedAt) {
			return ev, txid, false, nil // delayed: the table path delivers it when due
		}
	} else {
		ev.AvailableAt = ev.CreatedAt
	}
	ev.UpdatedAt = ev.CreatedAt
	ev.EventType, _ = col(r.eventType)
	ev.AggregateType, _ = col(r.aggregateType)
	ev.AggregateID, _ = col(r.aggregateID)
	ev.IdempotencyKey, _ = col(r.idempotencyKey)
	payload, _ := col(r.payload)
	ev.Payload = json.RawMessage(payload)
	if h, ok := col(r.headers); ok {
		if ev.Headers, err = driver.DecodeHeaders([]byte(h)); err != nil {
			return ev, txid, false, fmt.Errorf("event %d headers: %w", ev.ID, err)
		}
	}
	if m, ok := col(r.maxAttempts); ok {
		n, err := strconv.Atoi(m)
		if err != nil {
			return ev, txid, false, fmt.Errorf("event %d max_attempts %q: %w", ev.ID, m, err)
		}
		ev.MaxAttempts = n
	}
	ev.Status = outbox.StatusPending
	return ev, txid, true, nil
}

// matchAnyType reports whether typ matches one of the event-type
// patterns, as the table path's claim matches them in SQL (LIKE with
// driver.LikePatterns): * matches any run of characters, none included,
// and every other character itself.
func matchAnyType(patterns []string, typ string) bool {
	for _, p := range patterns {
		if matchType(p, typ) {
			return true
		}
	}
	return false
}

func matchType(pattern, name string) bool {
	// Iterative matching with one backtrack point.
	pi, ni, star, mark := 0, 0, -1, 0
	for ni < len(name) {
		switch {
		case pi < len(pattern) && pattern[pi] != '*' && pattern[pi] == name[ni]:
			pi++
			ni++
		case pi < len(pattern) && pattern[pi] == '*':
			star, mark = pi, ni
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			ni = mark
		default:
			return false
		}
	}
	for pi < len(pattern) && pattern[pi] == '*' {
		pi++
	}
	return pi == len(pattern)
}
