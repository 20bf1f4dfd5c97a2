package outboxcdc

import (
	"encoding/binary"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxkit/outbox"
)

// outboxColumns are the outbox table's columns in the order the
// migrations create them (the relation message lists them so).
var outboxColumns = []string{"id", "event_type", "aggregate_type", "aggregate_id", "payload", "headers",
	"idempotency_key", "status", "attempts", "max_attempts", "last_error", "available_at", "locked_until",
	"locked_by", "created_at", "updated_at", "processed_at", "lease_expiries", "dead_letter_retries",
	"dead_letter_retry_at", "txid"}

// cell is a column of a test row: nil is NULL, unchanged a TOASTed value
// pgoutput did not send.
type cell struct {
	text      *string
	unchanged bool
}

func txt(s string) cell { return cell{text: &s} }

var null = cell{}

// insertMessage encodes an Insert message as pgoutput sends it.
func insertMessage(rel uint32, row []cell) []byte {
	b := []byte{'I'}
	b = binary.BigEndian.AppendUint32(b, rel)
	b = append(b, 'N')
	b = binary.BigEndian.AppendUint16(b, uint16(len(row)))
	for _, c := range row {
		switch {
		case c.unchanged:
			b = append(b, 'u')
		case c.text == nil:
			b = append(b, 'n')
		default:
			b = append(b, 't')
			b = binary.BigEndian.AppendUint32(b, uint32(len(*c.text)))
			b = append(b, *c.text...)
		}
	}
	return b
}

// row is a pending, due, unchanged outbox row with the given changes by
// column name.
func row(changes map[string]cell) []cell {
	base := map[string]cell{
		"id": txt("42"), "event_type": txt("order.created"), "aggregate_type": txt("order"),
		"aggregate_id": txt("A-1"), "payload": txt(`{"total": 12.5, "note": "é\"x"}`), "headers": txt("{}"),
		"idempotency_key": null, "status": txt("pending"), "attempts": txt("0"), "max_attempts": null,
		"last_error": null, "available_at": txt("2026-12-05 02:09:32.123456+00"), "locked_until": null,
		"locked_by": null, "created_at": txt("2026-12-05 02:09:32.123456+00"),
		"updated_at": txt("2026-12-05 02:09:32.123456+00"), "processed_at": null, "lease_expiries": txt("0"),
		"dead_letter_retries": txt("0"), "dead_letter_retry_at": null, "txid": txt("7781"),
	}
	for k, v := range changes {
		base[k] = v
	}
	out := make([]cell, len(outboxColumns))
	for i, name := range outboxColumns {
		out[i] = base[name]
	}
	return out
}

func testRelation() *relation {
	m := &pglogrepl.RelationMessage{RelationID: 16400, Namespace: "public", RelationName: "outbox_events"}
	for _, name := range outboxColumns {
		m.Columns = append(m.Columns, &pglogrepl.RelationMessageColumn{Name: name})
	}
	return newRelation(m)
}

// TestParseInsertAgreesWithPglogrepl checks the allocation-free tuple
// reader against pglogrepl's decoder, column by column: text, NULL,
// unchanged TOAST, empty and multibyte values.
func TestParseInsertAgreesWithPglogrepl(t *testing.T) {
	t.Parallel()
	rows := [][]cell{
		row(nil),
		row(map[string]cell{"headers": txt(`{"trace": "abc", "n": 1}`), "idempotency_key": txt("k-1"), "max_attempts": txt("5")}),
		row(map[string]cell{"aggregate_type": null, "aggregate_id": null, "payload": txt("")}),
		row(map[string]cell{"payload": {unchanged: true}, "aggregate_id": txt("日本語")}),
		row(nil)[:1],
	}
	for i, r := range rows {
		msg := insertMessage(16400+uint32(i), r)
		want, err := pglogrepl.Parse(msg)
		if err != nil {
			t.Fatalf("row %d: pglogrepl: %v", i, err)
		}
		ins := want.(*pglogrepl.InsertMessage)
		rel, cols, err := parseInsert(msg, nil)
		if err != nil {
			t.Fatalf("row %d: parseInsert: %v", i, err)
		}
		if rel != ins.RelationID || len(cols) != len(ins.Tuple.Columns) {
			t.Fatalf("row %d: relation %d with %d columns, pglogrepl %d with %d", i, rel, len(cols), ins.RelationID, len(ins.Tuple.Columns))
		}
		for j, c := range cols {
			w := ins.Tuple.Columns[j]
			if c.kind != w.DataType || string(c.data) != string(w.Data) {
				t.Fatalf("row %d column %s: %q %q, pglogrepl %q %q", i, outboxColumns[j], c.kind, c.data, w.DataType, w.Data)
			}
		}
	}
}

// TestParseInsertRejectsTruncated checks that every cut of a message is
// an error, not a panic or a short row read as whole.
func TestParseInsertRejectsTruncated(t *testing.T) {
	t.Parallel()
	msg := insertMessage(1, row(map[string]cell{"headers": txt(`{"a":"b"}`)}))
	for n := range len(msg) {
		if _, _, err := parseInsert(msg[:n], nil); err == nil {
			t.Fatalf("a message cut at %d of %d bytes parsed", n, len(msg))
		}
	}
	if _, _, err := parseInsert(msg, nil); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeRow(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 5, 2, 9, 32, 123456000, time.UTC)
	later := "2026-12-05 02:09:33+00"
	cases := []struct {
		name    string
		changes map[string]cell
		types   []string
		ok      bool
		wantErr bool
		check   func(t *testing.T, ev outbox.Event)
	}{
		{name: "plain", ok: true, check: func(t *testing.T, ev outbox.Event) {
			want := outbox.Event{ID: 42, EventType: "order.created", AggregateType: "order", AggregateID: "A-1",
				Payload: json.RawMessage(`{"total": 12.5, "note": "é\"x"}`), Status: outbox.StatusPending,
				AvailableAt: at, CreatedAt: at, UpdatedAt: at}
			if !reflect.DeepEqual(ev, want) {
				t.Fatalf("decoded %+v\nwant    %+v", ev, want)
			}
		}},
		{name: "headers, key and max_attempts", ok: true,
			changes: map[string]cell{"headers": txt(`{"trace": "abc", "n": 1, "gone": null}`), "idempotency_key": txt("k-1"), "max_attempts": txt("5")},
			check: func(t *testing.T, ev outbox.Event) {
				if !reflect.DeepEqual(ev.Headers, map[string]string{"trace": "abc", "n": "1"}) || ev.IdempotencyKey != "k-1" || ev.MaxAttempts != 5 {
					t.Fatalf("headers %v, key %q, max_attempts %d", ev.Headers, ev.IdempotencyKey, ev.MaxAttempts)
				}
			}},
		{name: "NULL aggregate", ok: true, changes: map[string]cell{"aggregate_type": null, "aggregate_id": null},
			check: func(t *testing.T, ev outbox.Event) {
				if ev.AggregateType != "" || ev.AggregateID != "" || ev.EventType != "order.created" {
					t.Fatalf("%+v", ev)
				}
			}},
		{name: "multibyte text", ok: true, changes: map[string]cell{"aggregate_id": txt("日本語"), "idempotency_key": txt("ключ")},
			check: func(t *testing.T, ev outbox.Event) {
				if ev.AggregateID != "日本語" || ev.IdempotencyKey != "ключ" || ev.AggregateType != "order" {
					t.Fatalf("%+v", ev)
				}
			}},
		{name: "due earlier", ok: true, changes: map[string]cell{"available_at": txt("2026-12-05 02:09:31+00")},
			check: func(t *testing.T, ev outbox.Event) {
				if !ev.AvailableAt.Equal(time.Date(2026, 12, 5, 2, 9, 31, 0, time.UTC)) {
					t.Fatalf("available_at %v", ev.AvailableAt)
				}
			}},
		{name: "delayed", changes: map[string]cell{"available_at": txt(later)}},
		{name: "changed", changes: map[string]cell{"updated_at": txt(later)}},
		{name: "not pending", changes: map[string]cell{"status": txt("processed")}},
		{name: "another relay's type", types: []string{"payment.*"}},
		{name: "a matching type", types: []string{"order.*"}, ok: true},
		{name: "bad txid", changes: map[string]cell{"txid": txt("x")}, wantErr: true},
		{name: "bad headers", changes: map[string]cell{"headers": txt(`[1]`)}, wantErr: true},
		{name: "bad max_attempts", changes: map[string]cell{"max_attempts": txt("5x")}, wantErr: true},
		{name: "missing created_at", changes: map[string]cell{"created_at": null}, wantErr: true},
		{name: "bad created_at", changes: map[string]cell{"created_at": txt("yesterday"), "updated_at": txt("yesterday"), "available_at": txt("yesterday")}, wantErr: true},
	}
	rel := testRelation()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var d decoder
			_, cols, err := parseInsert(insertMessage(16400, row(tc.changes)), nil)
			if err != nil {
				t.Fatal(err)
			}
			ev, txid, ok, err := rel.decode(&d, cols, tc.types)
			if (err != nil) != tc.wantErr || ok != tc.ok {
				t.Fatalf("ok %v, err %v; want ok %v, error %v", ok, err, tc.ok, tc.wantErr)
			}
			if ok && txid != 7781 {
				t.Fatalf("txid %d", txid)
			}
			if tc.check != nil {
				tc.check(t, ev)
			}
		})
	}
}

// TestDecodeCopiesOutOfTheMessage checks that decoded events keep their
// values after the receive buffer they were read from is reused, and
// that the payload block shared by many events keeps each one's bytes.
func TestDecodeCopiesOutOfTheMessage(t *testing.T) {
	t.Parallel()
	rel := testRelation()
	var d decoder
	var cols []column
	var events []outbox.Event
	payloads := []string{`{"a":1}`, `{"b":"` + string(make([]byte, blockSize/2)) + `"}`, `{"c":[1,2,3]}`}
	for i := range 3000 {
		p := payloads[i%len(payloads)]
		msg := insertMessage(16400, row(map[string]cell{"payload": txt(p), "aggregate_id": txt("agg"), "idempotency_key": txt("key")}))
		var err error
		if _, cols, err = parseInsert(msg, cols); err != nil {
			t.Fatal(err)
		}
		ev, _, ok, err := rel.decode(&d, cols, nil)
		if err != nil || !ok {
			t.Fatalf("row %d: ok %v err %v", i, ok, err)
		}
		for j := range msg {
			msg[j] = 'X' // the next receive overwrites the buffer
		}
		events = append(events, ev)
	}
	for i, ev := range events {
		if string(ev.Payload) != payloads[i%len(payloads)] || ev.AggregateID != "agg" || ev.IdempotencyKey != "key" || ev.EventType != "order.created" {
			t.Fatalf("event %d changed: payload %.20q, aggregate %q, key %q", i, ev.Payload, ev.AggregateID, ev.IdempotencyKey)
		}
		if cap(ev.Payload) != len(ev.Payload) {
			t.Fatalf("event %d: an append to its payload would overwrite the next one's", i)
		}
	}
}

// TestParseTimestampAgreesWithTimeParse compares the fast path with
// time.Parse on the forms PostgreSQL writes and on malformed ones.
func TestParseTimestampAgreesWithTimeParse(t *testing.T) {
	t.Parallel()
	for _, s := range timestampSeeds {
		checkTimestamp(t, s)
	}
}

var timestampSeeds = []string{
	"2026-12-05 02:09:32.123456+00", "2026-12-05 02:09:32+00", "2026-12-05 02:09:32.1+00",
	"2024-02-29 23:59:59.999999+00", "2023-02-29 00:00:00+00", "2026-13-01 00:00:00+00",
	"2026-12-05 24:00:00+00", "2026-12-05 02:60:00+00", "2026-12-05 02:09:32.+00",
	"2026-12-05 02:09:32.1234567+00", "2026-12-05 02:09:32+02", "2026-12-05 02:09:32-07",
	"2026-12-05 02:09:32+05:30", "0001-01-01 00:00:00+00", "2026-12-05T02:09:32+00",
	"2026-12-05 02:09:32+00 BC", "12026-12-05 02:09:32+00", "2026-12-05 02:09:3a+00", "",
	"2026-04-31 00:00:00+00", "2000-02-29 12:00:00+00", "1900-02-29 12:00:00+00",
}

func checkTimestamp(t *testing.T, s string) {
	t.Helper()
	got, err := parseTimestamp([]byte(s))
	want, wantErr := time.Parse(timestampLayout, s)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%q: error %v, time.Parse's %v", s, err, wantErr)
	}
	if err == nil && !got.Equal(want) {
		t.Fatalf("%q: %v, time.Parse %v", s, got, want)
	}
}

func FuzzParseTimestamp(f *testing.F) {
	for _, s := range timestampSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkTimestamp(t, s) })
}

func TestParseUint(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]struct {
		n  uint64
		ok bool
	}{
		"0": {0, true}, "42": {42, true}, "18446744073709551615": {1<<64 - 1, true},
		"18446744073709551616": {0, false}, "": {0, false}, "-1": {0, false}, "1x": {0, false}, "+1": {0, false},
	} {
		if n, ok := parseUint([]byte(s)); n != want.n || ok != want.ok {
			t.Fatalf("%q: %d %v, want %d %v", s, n, ok, want.n, want.ok)
		}
	}
}

// TestSettleQueue checks that the publisher's outcomes reach the settler
// merged in publish order, that close is seen with the last of them, and
// that an abandoned queue drops what comes.
func TestSettleQueue(t *testing.T) {
	t.Parallel()
	q := newSettleQueue()
	q.add(settlement{delivered: []int64{1, 2}, txids: []uint64{10}, end: 100, seq: 1})
	q.add(settlement{delivered: []int64{3}, failures: []failure{{id: 4}}, txids: []uint64{11}, end: 200, seq: 2})
	select {
	case <-q.ready:
	default:
		t.Fatal("no signal after add")
	}
	s, closed := q.take()
	if closed || s == nil || !reflect.DeepEqual(s.delivered, []int64{1, 2, 3}) || !reflect.DeepEqual(s.txids, []uint64{10, 11}) ||
		len(s.failures) != 1 || s.end != 200 || s.seq != 2 {
		t.Fatalf("took %+v closed %v", s, closed)
	}
	if s, _ := q.take(); s != nil {
		t.Fatalf("took %+v twice", s)
	}
	q.add(settlement{delivered: []int64{5}, end: 300, seq: 3})
	q.close()
	s, closed = q.take()
	if !closed || s == nil || s.seq != 3 {
		t.Fatalf("took %+v closed %v after close", s, closed)
	}
	q2 := newSettleQueue()
	q2.abandon()
	q2.add(settlement{delivered: []int64{6}, seq: 1})
	if s, _ := q2.take(); s != nil {
		t.Fatalf("an abandoned queue kept %+v", s)
	}
}

func BenchmarkDecodeInsert(b *testing.B) {
	rel := testRelation()
	msg := insertMessage(16400, row(map[string]cell{"payload": txt(`{"order_id": "ord-123456", "customer": "c-42", "lines": [{"sku": "A", "qty": 1}], "total": 99.5, "currency": "EUR", "note": "` + string(make([]byte, 200)) + `"}`)}))
	var d decoder
	var cols []column
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if _, cols, err = parseInsert(msg, cols); err != nil {
			b.Fatal(err)
		}
		if _, _, ok, err := rel.decode(&d, cols, nil); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkDecodeInsertPglogrepl is what the relay did before: pglogrepl's
// decoder, then the columns as strings and time.Parse.
func BenchmarkDecodeInsertPglogrepl(b *testing.B) {
	msg := insertMessage(16400, row(map[string]cell{"payload": txt(`{"order_id": "ord-123456", "customer": "c-42", "lines": [{"sku": "A", "qty": 1}], "total": 99.5, "currency": "EUR", "note": "` + string(make([]byte, 200)) + `"}`)}))
	b.ReportAllocs()
	for b.Loop() {
		m, err := pglogrepl.Parse(msg)
		if err != nil {
			b.Fatal(err)
		}
		cols := m.(*pglogrepl.InsertMessage).Tuple.Columns
		strs := make([]string, len(cols))
		for i, c := range cols {
			strs[i] = string(c.Data)
		}
		if _, err := time.Parse(timestampLayout, strs[14]); err != nil {
			b.Fatal(err)
		}
	}
}
