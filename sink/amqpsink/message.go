package amqpsink

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/envelope"
	"github.com/outboxkit/outbox/route"
)

// Trace context headers: plain names, as OpenTelemetry's W3C propagator
// reads them from an AMQP headers table.
const (
	headerTraceParent = "traceparent"
	headerTraceState  = "tracestate"
)

// shortStrMax is the longest AMQP short string: routing keys and header
// names.
const shortStrMax = 255

// message is one event ready to publish.
type message struct {
	key string
	pub amqp.Publishing
}

// newMessage maps e to an AMQP message in CloudEvents binary content mode.
// It returns a permanent error for an event no broker would accept.
func (s *Sink) newMessage(e *outbox.Event) (message, error) {
	key := s.router.Route(e)
	if err := s.checkRoutingKey(key); err != nil {
		return message{}, outbox.Permanent(fmt.Errorf("amqpsink: event %d: %w", e.ID, err))
	}
	env := envelope.For(e, s.cfg.Source)
	headers := make(amqp.Table, len(env.Attributes)+2)
	for _, a := range env.Attributes {
		if a.Name == envelope.DataContentType {
			continue // the binding carries it as the content-type property
		}
		name := s.cfg.PropertyPrefix + a.Name
		if len(name) > shortStrMax {
			return message{}, outbox.Permanent(fmt.Errorf(
				"amqpsink: event %d: header %q becomes the %d-byte AMQP header name %.40q…, longer than %d bytes: shorten the header name",
				e.ID, a.Name, len(name), name, shortStrMax))
		}
		headers[name] = a.Value
	}
	if env.Trace.TraceParent != "" {
		headers[headerTraceParent] = env.Trace.TraceParent
	}
	if env.Trace.TraceState != "" {
		headers[headerTraceState] = env.Trace.TraceState
	}
	pub := amqp.Publishing{
		Headers:       headers,
		ContentType:   envelope.ContentType,
		DeliveryMode:  amqp.Persistent,
		MessageId:     e.UniqueID(),
		Type:          e.EventType,
		CorrelationId: e.CorrelationID(),
		Body:          e.Payload,
	}
	if !e.CreatedAt.IsZero() {
		pub.Timestamp = e.CreatedAt.UTC()
	}
	if len(pub.Type) > shortStrMax || len(pub.CorrelationId) > shortStrMax {
		// Both travel as AMQP short strings, which cannot hold them.
		return message{}, outbox.Permanent(fmt.Errorf(
			"amqpsink: event %d: the event type or correlation ID is longer than %d bytes, the most an AMQP message property holds: shorten it", e.ID, shortStrMax))
	}
	return message{key: key, pub: pub}, nil
}

var errEmptyKey = errors.New("the routing key is empty, and the default exchange routes by queue name: " +
	"set a route template, or configure an exchange")

// checkRoutingKey reports why key cannot be published.
func (s *Sink) checkRoutingKey(key string) error {
	switch {
	case key == "" && s.cfg.Exchange == "":
		return errEmptyKey
	case len(key) > shortStrMax:
		return fmt.Errorf("routing key %.40q… is %d bytes, longer than the %d AMQP allows: shorten the route or the %s header",
			key, len(key), shortStrMax, route.Header)
	}
	return nil
}
