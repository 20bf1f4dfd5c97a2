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
		h.Set("ce-"+a.Name, envelope.PercentEncode(a.Value))
	}
	// A value net/http would refuse to send is dropped rather than failing
	// the event.
	if v := env.Trace.TraceParent; v != "" && envelope.ValidHeaderValue(v) {
		h.Set("traceparent", v)
	}
	if v := env.Trace.TraceState; v != "" && envelope.ValidHeaderValue(v) {
		h.Set("tracestate", v)
	}
}

// AttributeName maps an event header name to the CloudEvents extension
// attribute that carries it: the name lowercased with every character
// other than a-z and 0-9 dropped (correlation_id becomes correlationid). It
// returns "" when nothing is left.
func AttributeName(header string) string { return envelope.AttributeName(header) }
