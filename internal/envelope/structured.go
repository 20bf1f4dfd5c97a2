package envelope

import (
	"bytes"
	"encoding/base64"
	"encoding/json"

	"github.com/outboxkit/outbox"
)

// Member names of the structured-mode JSON besides the attributes.
const (
	// MemberData holds a JSON payload, embedded byte for byte as stored.
	MemberData = "data"
	// MemberDataBase64 holds a payload that is not valid JSON, base64
	// encoded, as the CloudEvents JSON format requires.
	MemberDataBase64 = "data_base64"
	// MemberTraceParent and MemberTraceState hold the W3C trace context,
	// as the CloudEvents distributed tracing extension names it.
	MemberTraceParent = "traceparent"
	MemberTraceState  = "tracestate"
)

// AppendJSON writes e as a CloudEvents JSON event (structured content
// mode) to b: the attributes, the trace context, and the payload embedded
// as data exactly as stored (as data_base64 when it is not valid JSON).
// source is the CloudEvents source; empty means SourceDefault.
func AppendJSON(b *bytes.Buffer, e *outbox.Event, source string) {
	env := For(e, source)
	b.Grow(len(e.Payload) + 512)
	b.WriteByte('{')
	first := true
	member := func(name, value string) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		writeString(b, name)
		b.WriteByte(':')
		writeString(b, value)
	}
	for _, a := range env.Attributes {
		member(a.Name, a.Value)
	}
	if env.Trace.TraceParent != "" {
		member(MemberTraceParent, env.Trace.TraceParent)
	}
	if env.Trace.TraceState != "" {
		member(MemberTraceState, env.Trace.TraceState)
	}
	if json.Valid(e.Payload) {
		b.WriteString(`,"` + MemberData + `":`)
		b.Write(e.Payload)
	} else {
		member(MemberDataBase64, base64.StdEncoding.EncodeToString(e.Payload))
	}
	b.WriteByte('}')
}

// writeString writes s as a JSON string, as json.Marshal writes it:
// invalid UTF-8 becomes U+FFFD, and <, > and & are escaped. A string of
// printable ASCII that needs no escape (event types, IDs, times, sources
// mostly are) is written as it is, without json.Marshal's allocation and
// reflection.
func writeString(b *bytes.Buffer, s string) {
	if plainJSON(s) {
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	q, _ := json.Marshal(s) // a string always marshals
	b.Write(q)
}

// plainJSON reports whether json.Marshal writes s between quotes unchanged:
// printable ASCII other than the quote, the backslash and the HTML
// characters it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < ' ' || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
