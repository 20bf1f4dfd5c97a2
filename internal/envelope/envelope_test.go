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
