package mqttsink

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/envelope"
	"github.com/outboxkit/outbox/route"
)

// Member names of the structured-mode JSON besides the attributes.
const (
	// MemberData holds a JSON payload, embedded byte for byte as stored.
	MemberData = envelope.MemberData
	// MemberDataBase64 holds a payload that is not valid JSON, base64
	// encoded, as the CloudEvents JSON format requires.
	MemberDataBase64 = envelope.MemberDataBase64
	// MemberTraceParent and MemberTraceState hold the W3C trace context,
	// as the CloudEvents distributed tracing extension names it.
	MemberTraceParent = envelope.MemberTraceParent
	MemberTraceState  = envelope.MemberTraceState
)

// topicMax is the longest topic name MQTT can carry: a two-byte length.
const topicMax = 65535

// checkTopic reports why topic cannot be published to.
func checkTopic(topic string) error {
	switch {
	case topic == "":
		return fmt.Errorf("the route gives an empty topic: set the route template or the event's %s header", route.Header)
	case strings.ContainsAny(topic, "+#"):
		return fmt.Errorf("topic %q holds a wildcard (+ or #), which MQTT allows only in subscriptions: route the event to a plain topic", clip(topic))
	case strings.HasPrefix(topic, "$"):
		return fmt.Errorf("topic %q starts with $, which brokers reserve for themselves ($SYS): route the event to another topic", clip(topic))
	case len(topic) > topicMax:
		return fmt.Errorf("topic %q… is %d bytes, longer than the %d MQTT allows: shorten the route", clip(topic), len(topic), topicMax)
	case !utf8.ValidString(topic) || strings.ContainsRune(topic, 0):
		return fmt.Errorf("topic %q is not valid UTF-8 without NUL characters, as MQTT requires: fix the route or the event's fields", clip(topic))
	}
	return nil
}

// clip shortens a topic quoted in an error.
func clip(s string) string {
	if len(s) <= 80 {
		return s
	}
	cut := 80
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// newPayload maps e to a CloudEvents JSON event (structured content mode):
// the attributes, the trace context, and the payload embedded as data
// exactly as stored. It returns a permanent error for an event no broker
// would accept.
func (s *Sink) newPayload(e *outbox.Event) (topic string, payload []byte, err error) {
	topic = s.router.Route(e)
	if err := checkTopic(topic); err != nil {
		return "", nil, outbox.Permanent(fmt.Errorf("mqttsink: event %d: %w", e.ID, err))
	}
	var b bytes.Buffer
	envelope.AppendJSON(&b, e, s.cfg.Source)
	return topic, b.Bytes(), nil
}
