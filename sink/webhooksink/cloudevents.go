package webhooksink

import (
	"net/http"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/envelope"
)

// setCloudEventHeaders sets the binary-mode CloudEvents headers for e: each
// attribute of the shared envelope as a ce- header, except datacontenttype,
// which is Content-Type; the W3C trace context as plain traceparent and
// tracestate headers (the distributed tracing extension's HTTP form).
func setCloudEventHeaders(h http.Header, source string, e *outbox.Event) {
	env := envelope.For(e, source)
	for _, a := range env.Attributes {
		if a.Name == envelope.DataContentType {
			h.Set("Content-Type", a.Value)
			continue
		}
		h.Set("ce-"+a.Name, percentEncode(a.Value))
	}
	// A value net/http would refuse to send is dropped rather than failing
	// the event.
	if v := env.Trace.TraceParent; v != "" && validHeaderValue(v) {
		h.Set("traceparent", v)
	}
	if v := env.Trace.TraceState; v != "" && validHeaderValue(v) {
		h.Set("tracestate", v)
	}
}

// AttributeName maps an event header name to the CloudEvents extension
// attribute that carries it: the name lowercased with every character
// other than a-z and 0-9 dropped (correlation_id becomes correlationid). It
// returns "" when nothing is left.
func AttributeName(header string) string { return envelope.AttributeName(header) }

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
