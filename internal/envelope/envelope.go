// Package envelope maps an outbox event to the metadata every sink carries:
// the CloudEvents 1.0 context attributes, extension attributes from the
// event's headers, and the W3C trace context. Each sink writes these in its
// protocol's CloudEvents binding (HTTP ce- headers, Kafka ce_ headers, AMQP
// cloudEvents_ application properties, MQTT structured JSON…), so a consumer dedupes on
// the same id whatever the broker.
package envelope

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
)

// CloudEvents attribute names set from the event itself.
const (
	SpecVersion     = "specversion"
	ID              = "id"
	Type            = "type"
	Source          = "source"
	Subject         = "subject"
	Time            = "time"
	DataContentType = "datacontenttype"
	// AggregateType is the extension that carries the event's aggregate
	// type; subject carries its aggregate ID.
	AggregateType = "aggregatetype"
	// Tenant is the extension that carries Event.Tenant, the schema of a
	// relay that serves several; Database carries Event.Database. Each is
	// set only when the event has one, and then no header may shadow it.
	Tenant   = "tenant"
	Database = "database"

	// SpecVersionValue is the CloudEvents version sinks speak.
	SpecVersionValue = "1.0"
	// ContentType is the payload's media type: outbox payloads are JSON.
	ContentType = "application/json"
	// SourceDefault is the source attribute when a sink is not told one.
	SourceDefault = "/outbox"
)

// reserved are the CloudEvents 1.0 context attribute names and the
// extension set from the event; headers may not shadow them.
var reserved = []string{
	SpecVersion, ID, Source, Type, DataContentType, "dataschema", Subject, Time, "data", AggregateType,
}

// Attribute is one CloudEvents attribute.
type Attribute struct {
	Name  string
	Value string
}

// Trace is the W3C trace context stored with the event, if any.
type Trace struct {
	TraceParent string
	TraceState  string
}

// Envelope is everything a sink sends besides the payload.
type Envelope struct {
	// Attributes lists the context attributes (specversion, id, type,
	// source, subject, time, datacontenttype, aggregatetype, and tenant and
	// database when the event has them) followed by
	// one extension per event header, sorted by name.
	Attributes []Attribute
	Trace      Trace
}

// For returns e's envelope. source is the CloudEvents source; empty means
// SourceDefault.
func For(e *outbox.Event, source string) Envelope {
	if source == "" {
		source = SourceDefault
	}
	attrs := make([]Attribute, 0, 8+len(e.Headers))
	add := func(name, value string) {
		if value != "" {
			attrs = append(attrs, Attribute{Name: name, Value: value})
		}
	}
	add(SpecVersion, SpecVersionValue)
	// The id is unique per source; with several sources it is qualified
	// by the tenant and database, since brokers (JetStream) and consumers
	// drop duplicates on it alone.
	add(ID, e.UniqueID())
	add(Type, e.EventType)
	add(Source, source)
	add(Subject, e.AggregateID)
	if !e.CreatedAt.IsZero() {
		add(Time, e.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	add(DataContentType, ContentType)
	add(AggregateType, e.AggregateType)
	add(Tenant, e.Tenant)
	add(Database, e.Database)

	var env Envelope
	// Most events have no headers: no sort and no map for them.
	if len(e.Headers) > 0 {
		// Sorted so that, of several headers mapping to one name, the same one
		// wins on every delivery.
		seen := make(map[string]bool, len(e.Headers))
		for _, header := range slices.Sorted(maps.Keys(e.Headers)) {
			name := AttributeName(header)
			if name == "" || seen[name] || slices.Contains(reserved, name) ||
				name == Tenant && e.Tenant != "" || name == Database && e.Database != "" {
				continue
			}
			seen[name] = true
			value := e.Headers[header]
			switch name {
			case outbox.HeaderTraceParent:
				env.Trace.TraceParent = value
			case outbox.HeaderTraceState:
				env.Trace.TraceState = value
			default:
				attrs = append(attrs, Attribute{Name: name, Value: value})
			}
		}
	}
	env.Attributes = attrs
	return env
}

// AttributeName maps an event header name to the CloudEvents extension
// attribute that carries it: lowercased, with every character other than
// a-z and 0-9 dropped (correlation_id becomes correlationid). It returns ""
// when nothing is left.
func AttributeName(header string) string {
	var b strings.Builder
	for i := 0; i < len(header); i++ {
		c := header[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		}
	}
	return b.String()
}
