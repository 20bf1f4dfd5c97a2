package outboxcdc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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

// column is one column of an insert's tuple as pgoutput sends it: kind is
// 't' (text), 'n' (NULL), 'u' (an unchanged TOASTed value) or 'b'
// (binary); data aliases the message.
type column struct {
	kind byte
	data []byte
}

// parseInsert reads a pgoutput Insert message (data starts with 'I'):
// its relation and its tuple's columns, appended to cols[:0] without
// copying. The columns alias data, which the next receive overwrites.
func parseInsert(data []byte, cols []column) (uint32, []column, error) {
	cols = cols[:0]
	if len(data) < 8 || data[0] != 'I' || data[5] != 'N' {
		return 0, cols, errors.New("malformed insert message")
	}
	rel := binary.BigEndian.Uint32(data[1:5])
	n := int(binary.BigEndian.Uint16(data[6:8]))
	p := 8
	for range n {
		if p >= len(data) {
			return rel, cols, errors.New("insert message cut short")
		}
		c := column{kind: data[p]}
		p++
		if c.kind == 't' || c.kind == 'b' {
			if p+4 > len(data) {
				return rel, cols, errors.New("insert message cut short")
			}
			l := int(binary.BigEndian.Uint32(data[p : p+4]))
			p += 4
			if l < 0 || p+l > len(data) {
				return rel, cols, errors.New("insert message cut short")
			}
			c.data = data[p : p+l : p+l]
			p += l
		}
		cols = append(cols, c)
	}
	return rel, cols, nil
}

// decoder turns inserted rows into events with few allocations: one
// string per row holds its text fields, and payloads are copied into a
// shared block (a new one when it is full; the old one lives as long as
// its events).
type decoder struct {
	text  []byte // the row's text fields, before they become one string
	block []byte // payload storage
}

// blockSize is the payload storage allocated at once.
const blockSize = 64 << 10

// payload copies b out of the message.
func (d *decoder) payload(b []byte) []byte {
	if len(b) > blockSize/4 {
		p := make([]byte, len(b))
		copy(p, b)
		return p
	}
	if cap(d.block)-len(d.block) < len(b) {
		d.block = make([]byte, 0, blockSize)
	}
	i := len(d.block)
	d.block = append(d.block, b...)
	return d.block[i:len(d.block):len(d.block)]
}

// decode reads an inserted row from its columns (parseInsert). ok is
// false for a row the stream leaves to the table path (the stream does not
// settle it): not pending, delayed, or already changed; and for a row
// whose event type matches none of types (when not empty), left to the
// relays serving that type.
//
// txid is the writing transaction's ID (the txid column): the settler
// waits until it is visible before it marks the row.
func (r *relation) decode(d *decoder, cols []column, types []string) (ev outbox.Event, txid uint64, ok bool, err error) {
	col := func(i int) ([]byte, bool) {
		if i < 0 || i >= len(cols) || cols[i].kind != 't' {
			return nil, false
		}
		return cols[i].data, true
	}
	status, _ := col(r.status)
	if string(status) != "pending" {
		return ev, txid, false, nil
	}
	typ, _ := col(r.eventType)
	if len(types) > 0 && !matchAnyType(types, string(typ)) {
		return ev, txid, false, nil // another relay's: read nothing else of it
	}
	id, _ := col(r.id)
	n, ok := parseUint(id)
	if !ok || n > math.MaxInt64 {
		return ev, txid, false, fmt.Errorf("id %q: not a bigint", id)
	}
	ev.ID = int64(n)
	x, _ := col(r.txid)
	if txid, ok = parseUint(x); !ok {
		return ev, txid, false, fmt.Errorf("txid %q: not an xid8 (outbox migrate: the table needs migration 7)", x)
	}
	created, ok1 := col(r.createdAt)
	updated, ok2 := col(r.updatedAt)
	avail, ok3 := col(r.availableAt)
	if !ok1 || !ok2 || !ok3 {
		return ev, txid, false, fmt.Errorf("insert lacks created_at, updated_at or available_at")
	}
	if !bytes.Equal(updated, created) {
		return ev, txid, false, nil
	}
	if ev.CreatedAt, err = parseTimestamp(created); err != nil {
		return ev, txid, false, fmt.Errorf("created_at %q: %w", created, err)
	}
	if !bytes.Equal(avail, created) {
		if ev.AvailableAt, err = parseTimestamp(avail); err != nil {
			return ev, txid, false, fmt.Errorf("available_at %q: %w", avail, err)
		}
		if ev.AvailableAt.After(ev.CreatedAt) {
			return ev, txid, false, nil // delayed: the table path delivers it when due
		}
	} else {
		ev.AvailableAt = ev.CreatedAt
	}
	ev.UpdatedAt = ev.CreatedAt
	aggType, _ := col(r.aggregateType)
	aggID, _ := col(r.aggregateID)
	key, _ := col(r.idempotencyKey)
	d.text = append(append(append(append(d.text[:0], typ...), aggType...), aggID...), key...)
	text := string(d.text)
	ev.EventType, text = text[:len(typ)], text[len(typ):]
	ev.AggregateType, text = text[:len(aggType)], text[len(aggType):]
	ev.AggregateID, ev.IdempotencyKey = text[:len(aggID)], text[len(aggID):]
	if payload, ok := col(r.payload); ok {
		ev.Payload = json.RawMessage(d.payload(payload))
	}
	if h, ok := col(r.headers); ok {
		if ev.Headers, err = driver.DecodeHeaders(h); err != nil {
			return ev, txid, false, fmt.Errorf("event %d headers: %w", ev.ID, err)
		}
	}
	if m, ok := col(r.maxAttempts); ok {
		n, ok := parseInt(m)
		if !ok {
			return ev, txid, false, fmt.Errorf("event %d max_attempts %q: not an integer", ev.ID, m)
		}
		ev.MaxAttempts = n
	}
	ev.Status = outbox.StatusPending
	return ev, txid, true, nil
}

// parseUint reads a decimal without sign, as PostgreSQL writes a bigint
// or an xid8 that is not negative.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// parseInt reads an int column (max_attempts).
func parseInt(b []byte) (int, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	n, ok := parseUint(b)
	if !ok || n > math.MaxInt32+1 || (!neg && n > math.MaxInt32) {
		return 0, false
	}
	if neg {
		return -int(n), true
	}
	return int(n), true
}

// parseTimestamp reads a timestamptz in its ISO text form, as the
// replication connection (DateStyle ISO, TimeZone UTC) receives it:
// "2006-01-02 15:04:05.999999+00". It reads that form without time.Parse
// (a tenth of its cost, per row of a burst), and leaves any other form
// (another zone, a year beyond 9999, BC) to time.Parse. The result is the
// same instant as time.Parse's, in UTC.
func parseTimestamp(b []byte) (time.Time, error) {
	// "2006-01-02 15:04:05" then optional ".ffffff", then "+00".
	if len(b) < 22 || b[4] != '-' || b[7] != '-' || b[10] != ' ' || b[13] != ':' || b[16] != ':' {
		return time.Parse(timestampLayout, string(b))
	}
	num := func(i, n int) (int, bool) {
		v := 0
		for _, c := range b[i : i+n] {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		return v, true
	}
	year, ok1 := num(0, 4)
	month, ok2 := num(5, 2)
	day, ok3 := num(8, 2)
	hour, ok4 := num(11, 2)
	minute, ok5 := num(14, 2)
	sec, ok6 := num(17, 2)
	p, nsec := 19, 0
	if p < len(b) && b[p] == '.' {
		p++
		digits := 0
		for p < len(b) && b[p] >= '0' && b[p] <= '9' {
			if digits < 9 {
				nsec = nsec*10 + int(b[p]-'0')
			}
			digits++
			p++
		}
		if digits == 0 || digits > 6 {
			return time.Parse(timestampLayout, string(b))
		}
		for range 9 - digits {
			nsec *= 10
		}
	}
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || string(b[p:]) != "+00" ||
		month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Parse(timestampLayout, string(b))
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), nil
}

// daysIn is the number of days of month in year.
func daysIn(month, year int) int {
	if month == 2 {
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	}
	if month == 4 || month == 6 || month == 9 || month == 11 {
		return 30
	}
	return 31
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
