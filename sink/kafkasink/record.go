package kafkasink

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/envelope"
)

// Header names of the CloudEvents Kafka binding's binary content mode.
const (
	// HeaderPrefix starts the name of every header that carries a
	// CloudEvents attribute.
	HeaderPrefix = "ce_"
	// HeaderContentType carries the datacontenttype attribute.
	HeaderContentType = "content-type"
)

// TopicMaxLen is the longest topic name Kafka accepts.
const TopicMaxLen = 249

// newRecord builds the binary-mode CloudEvents record for e on topic.
func newRecord(topic, source string, e *outbox.Event) *kgo.Record {
	env := envelope.For(e, source)
	headers := make([]kgo.RecordHeader, 0, len(env.Attributes)+2)
	for _, a := range env.Attributes {
		name := HeaderPrefix + a.Name
		if a.Name == envelope.DataContentType {
			name = HeaderContentType
		}
		headers = append(headers, kgo.RecordHeader{Key: name, Value: []byte(a.Value)})
	}
	if v := env.Trace.TraceParent; v != "" {
		headers = append(headers, kgo.RecordHeader{Key: outbox.HeaderTraceParent, Value: []byte(v)})
	}
	if v := env.Trace.TraceState; v != "" {
		headers = append(headers, kgo.RecordHeader{Key: outbox.HeaderTraceState, Value: []byte(v)})
	}
	r := &kgo.Record{Topic: topic, Value: e.Payload, Headers: headers}
	if e.AggregateID != "" {
		// One aggregate, one partition: its events stay in order.
		r.Key = []byte(e.AggregateID)
	}
	return r
}

// checkTopic reports why topic is not a legal Kafka topic name, or nil.
func checkTopic(topic string) error {
	switch {
	case topic == "":
		return errors.New("is empty: set a route template or the event fields it uses")
	case len(topic) > TopicMaxLen:
		return fmt.Errorf("is %d bytes long: Kafka topic names are at most %d", len(topic), TopicMaxLen)
	case topic == "." || topic == "..":
		return fmt.Errorf("%q is reserved: use another topic name", topic)
	}
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			continue
		}
		return fmt.Errorf("%q has %q at byte %d: Kafka topic names hold only ASCII letters, digits, '.', '_' and '-'", topic, c, i)
	}
	return nil
}
