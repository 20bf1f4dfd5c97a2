package envelope

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

func TestFor(t *testing.T) {
	t.Parallel()
	e := outbox.Event{
		ID: 42, EventType: "order.created", AggregateType: "order", AggregateID: "o-1",
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600)),
		Headers: map[string]string{
			"correlation_id": "c", "Causation-ID": "k", "schema_version": "2",
			"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "a=b",
			"id": "shadow", "Type": "shadow", "___": "empty", "correlationid": "collides",
		},
	}
	env := For(&e, "")
	require.Equal(t, []Attribute{
		{"specversion", "1.0"}, {"id", "42"}, {"type", "order.created"}, {"source", "/outbox"},
		{"subject", "o-1"}, {"time", "2026-01-02T02:04:05.000006Z"}, {"datacontenttype", "application/json"},
		{"aggregatetype", "order"},
		{"causationid", "k"}, {"correlationid", "c"}, {"schemaversion", "2"},
	}, env.Attributes)
	require.Equal(t, Trace{TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", TraceState: "a=b"}, env.Trace)

	bare := For(&outbox.Event{ID: 1, EventType: "x"}, "/svc")
	require.Equal(t, []Attribute{{"specversion", "1.0"}, {"id", "1"}, {"type", "x"}, {"source", "/svc"}, {"datacontenttype", "application/json"}}, bare.Attributes)
}

func FuzzAttributeName(f *testing.F) {
	for _, s := range []string{"correlation_id", "X-Trace", "", "é", "A1_b2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range []byte(AttributeName(s)) {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
				t.Fatalf("AttributeName(%q) has %q", s, c)
			}
		}
	})
}

func TestForTenant(t *testing.T) {
	t.Parallel()
	// A single-schema relay: a header named tenant travels as before.
	plain := For(&outbox.Event{ID: 7, EventType: "x", Headers: map[string]string{"tenant": "from-header"}}, "")
	require.Contains(t, plain.Attributes, Attribute{"id", "7"})
	require.Contains(t, plain.Attributes, Attribute{"tenant", "from-header"})

	// A tenant relay: the schema is the tenant, no header shadows it, and
	// the id is qualified.
	e := outbox.Event{ID: 7, EventType: "x", Tenant: "s_acme", Headers: map[string]string{"tenant": "s_other", "Database": "db9"}}
	env := For(&e, "")
	require.Equal(t, []Attribute{
		{"specversion", "1.0"}, {"id", "s_acme:7"}, {"type", "x"}, {"source", "/outbox"},
		{"datacontenttype", "application/json"}, {"tenant", "s_acme"}, {"database", "db9"},
	}, env.Attributes)

	e.Database = "db1.example:5432/app"
	env = For(&e, "")
	require.Equal(t, []Attribute{
		{"specversion", "1.0"}, {"id", "db1.example%3A5432/app:s_acme:7"}, {"type", "x"}, {"source", "/outbox"},
		{"datacontenttype", "application/json"}, {"tenant", "s_acme"}, {"database", "db1.example:5432/app"},
	}, env.Attributes)
}

func TestUniqueIDNeverCollides(t *testing.T) {
	t.Parallel()
	events := []outbox.Event{
		{ID: 1}, {ID: 1, Tenant: "a"}, {ID: 1, Tenant: "b"}, {ID: 1, Tenant: "a:1"},
		{ID: 1, Tenant: "a", Database: "d"}, {ID: 1, Tenant: "d:a"}, {ID: 1, Tenant: "a", Database: "d:x"},
		{ID: 1, Tenant: "x:a", Database: "d"}, {ID: 1, Tenant: `x"; drop table y; --`}, {ID: 1, Tenant: "a%3A1"},
	}
	seen := map[string]int{}
	for i, e := range events {
		id := e.UniqueID()
		if j, dup := seen[id]; dup {
			t.Fatalf("events %d and %d share the id %q", j, i, id)
		}
		seen[id] = i
		require.True(t, ValidHeaderValue(id), id)
	}
	require.Equal(t, "x%22;%20drop%20table%20y;%20--:1", events[8].UniqueID())
}
