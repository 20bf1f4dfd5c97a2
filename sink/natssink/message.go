package natssink

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/envelope"
)

// HeaderPrefix starts the name of every NATS header that carries a
// CloudEvents attribute, as the CloudEvents NATS binding's binary mode
// prescribes.
const HeaderPrefix = "ce-"

// newMsg builds the binary-mode CloudEvents message for e on subject.
// It is on the hot path of every publish, so the header's values share
// one backing array and the names of the attributes every event has are
// constants, instead of an allocation per header.
func newMsg(subject, source string, e *outbox.Event) *nats.Msg {
	env := envelope.For(e, source)
	n := len(env.Attributes) + 3
	h := make(nats.Header, n+1) // jetstream adds Nats-Expected-Stream
	values := make([]string, 0, n)
	set := func(name, value string) {
		values = append(values, value)
		h[name] = values[len(values)-1 : len(values) : len(values)]
	}
	msgID := ""
	for _, a := range env.Attributes {
		// datacontenttype is an attribute like any other here: in the NATS
		// binding a Content-Type header would mean structured mode.
		set(headerName(a.Name), envelope.PercentEncode(a.Value))
		if a.Name == envelope.ID {
			msgID = a.Value // e.UniqueID(), formatted once
		}
	}
	if msgID == "" {
		msgID = e.UniqueID()
	}
	set(jetstream.MsgIDHeader, msgID)
	if v := env.Trace.TraceParent; v != "" && envelope.ValidHeaderValue(v) {
		set(outbox.HeaderTraceParent, v)
	}
	if v := env.Trace.TraceState; v != "" && envelope.ValidHeaderValue(v) {
		set(outbox.HeaderTraceState, v)
	}
	return &nats.Msg{Subject: subject, Header: h, Data: e.Payload}
}

// headerNames maps the attributes every event has to HeaderPrefix+name,
// built once so that a message's headers do not concatenate them.
var headerNames = func() map[string]string {
	m := make(map[string]string)
	for _, name := range []string{envelope.SpecVersion, envelope.ID, envelope.Type, envelope.Source,
		envelope.Subject, envelope.Time, envelope.DataContentType, envelope.AggregateType} {
		m[name] = HeaderPrefix + name
	}
	return m
}()

// headerName is HeaderPrefix+name.
func headerName(name string) string {
	if h, ok := headerNames[name]; ok {
		return h
	}
	return HeaderPrefix + name
}

// checkSubject reports why subject cannot be published to, or nil.
func checkSubject(subject string) error {
	if err := checkTokens(subject); err != nil {
		return err
	}
	if strings.HasPrefix(subject, "$") {
		return errors.New("starts with $, which NATS reserves for its system APIs ($JS, $SYS, $KV): route the event to an application subject")
	}
	for rest := subject; rest != ""; {
		var tok string
		tok, rest, _ = strings.Cut(rest, ".")
		if tok == "*" || tok == ">" {
			return fmt.Errorf("has the wildcard token %q, which can be subscribed to but not published to: route the event to a literal subject", tok)
		}
	}
	return nil
}

// checkStreamSubject reports why subject cannot be a stream's subject
// filter, or nil. Wildcards are allowed.
func checkStreamSubject(subject string) error {
	if err := checkTokens(subject); err != nil {
		return fmt.Errorf("stream subject %w", err)
	}
	tokens := strings.Split(subject, ".")
	for i, tok := range tokens {
		if tok == ">" && i != len(tokens)-1 {
			return fmt.Errorf("stream subject %q has > before its last token: > matches the rest of a subject and must come last", subject)
		}
	}
	return nil
}

// checkTokens rejects what no NATS subject may hold: nothing at all,
// whitespace or control characters, and empty tokens.
func checkTokens(subject string) error {
	if subject == "" {
		return errors.New("is empty: set a route template or the event fields it uses")
	}
	for i := 0; i < len(subject); i++ {
		if c := subject[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("%q holds whitespace or a control character at byte %d: NATS subjects cannot", subject, i)
		}
	}
	if strings.HasPrefix(subject, ".") || strings.HasSuffix(subject, ".") || strings.Contains(subject, "..") {
		return fmt.Errorf("%q has an empty token (a leading, trailing or doubled dot): fill in the event field the route template uses or give the template a fallback such as {aggregate_type|events}", subject)
	}
	return nil
}
