package webhooksink

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
)

// CloudEvents HTTP binary-mode header names. net/http canonicalizes them
// (Ce-Id); HTTP header names are case-insensitive.
const (
	headerSpecVersion   = "ce-specversion"
	headerID            = "ce-id"
	headerType          = "ce-type"
	headerSource        = "ce-source"
	headerSubject       = "ce-subject"
	headerTime          = "ce-time"
	headerAggregateType = "ce-aggregatetype"
	headerTraceParent   = "traceparent"
	headerTraceState    = "tracestate"

	specVersion = "1.0"
	contentType = "application/json"
)

// reservedAttributes are the CloudEvents 1.0 context attributes and the
// extension this sink sets itself; event headers may not shadow them.
var reservedAttributes = []string{
	"specversion", "id", "source", "type", "datacontenttype", "dataschema", "subject", "time", "data",
	"aggregatetype",
}

// setCloudEventHeaders sets the binary-mode CloudEvents headers for e.
func setCloudEventHeaders(h http.Header, source string, e *outbox.Event) {
	set := func(name, value string) { h.Set(name, percentEncode(value)) }
	set(headerSpecVersion, specVersion)
	set(headerID, strconv.FormatInt(e.ID, 10))
	set(headerType, e.EventType)
	set(headerSource, source)
	if e.AggregateID != "" {
		set(headerSubject, e.AggregateID)
	}
	if !e.CreatedAt.IsZero() {
		set(headerTime, e.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	if e.AggregateType != "" {
		set(headerAggregateType, e.AggregateType)
	}
	h.Set("Content-Type", contentType)

	// Sorted so that, of several headers mapping to one name, the same
	// one wins on every delivery.
	seen := make(map[string]bool, len(e.Headers))
	for _, name := range slices.Sorted(maps.Keys(e.Headers)) {
		attr := AttributeName(name)
		if attr == "" || seen[attr] || slices.Contains(reservedAttributes, attr) {
			continue
		}
		seen[attr] = true
		value := e.Headers[name]
		switch attr {
		case headerTraceParent, headerTraceState:
			// W3C trace context travels as plain HTTP headers; a value
			// net/http would refuse to send is dropped rather than
			// failing the event.
			if validHeaderValue(value) {
				h.Set(attr, value)
			}
		default:
			set("ce-"+attr, value)
		}
	}
}

// AttributeName maps an event header name to the CloudEvents extension
// attribute that carries it: the name lowercased with every character
// other than a-z and 0-9 dropped (correlation_id becomes correlationid). It
// returns "" when nothing is left.
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

// percentEncode encodes a CloudEvents attribute value for an HTTP header as
// the HTTP protocol binding (1.0.2, 3.1.3.2) requires: space, double
// quote, percent and every byte outside printable ASCII (which covers the
// UTF-8 bytes of every non-ASCII character) become %XX.
func percentEncode(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if mustEncode(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if mustEncode(c) {
			b = append(b, '%', hex[c>>4], hex[c&0xf])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func mustEncode(c byte) bool { return c <= ' ' || c == '"' || c == '%' || c >= 0x7f }
