// Package amqpsink is an outbox.Sink that publishes events to RabbitMQ (or
// any AMQP 0-9-1 broker) with publisher confirms, as CloudEvents in the AMQP
// binding's binary content mode.
//
//	cfg, err := amqpsink.ConfigFromURL("amqp://user:pass@rabbit:5672/prod?exchange=events&declare_exchange=true")
//	if err != nil {
//		return err
//	}
//	sink, err := amqpsink.New(ctx, cfg)
//	if err != nil {
//		return err // one line naming the broker, never the password
//	}
//	defer sink.Close()
//	relay, err := outbox.NewRelay(db, outbox.RelayConfig{Sink: sink})
//
// # URL
//
//	amqp://[user:pass@]host[:port][/vhost][?option=value&…]
//	amqps://…  (TLS; port 5671 by default)
//
// User, password and vhost are percent-encoded; the vhost "/" is written
// %2F, and no path means "/". ConfigFromURL takes these options from the
// query:
//
//	exchange          the exchange to publish to; empty (the default) is the default exchange,
//	                  where the routing key names the queue
//	exchange_type     topic (default), direct, fanout, headers or x-…, for declare_exchange
//	declare_exchange  true: declare the exchange (durable) at connect if it is missing
//	route             the routing key template (see package route); default {aggregate_type|events}.{event_type}
//	source            the CloudEvents source attribute; default /outbox
//	unroutable        retry (default) or permanent: what an unroutable message is, see Results
//	property_prefix   cloudEvents_ (default) or cloudEvents:, see Metadata
//	connection_name   the name shown in the management UI; default outbox-relay
//
// and leaves amqp091's own connection parameters in Config.URL: heartbeat
// (seconds), connection_timeout (milliseconds; Config.DialTimeout applies
// instead), channel_max, auth_mechanism, and for amqps cacertfile, certfile,
// keyfile and server_name_indication. Config.TLS replaces the TLS settings
// from the URL.
//
// # Messages
//
// One message per event, published with the mandatory flag. The body is the
// payload exactly as stored. The routing key comes from Config.Router: an
// event's outbox_topic header, else the first matching rule, else the
// default template. Properties and headers follow the CloudEvents AMQP
// protocol binding in binary content mode:
//
//	content-type            application/json (the datacontenttype attribute)
//	delivery-mode           2, persistent
//	message-id              Event.UniqueID(): the ID in decimal (qualified <tenant>:<id>
//	                        by a relay serving several schemas), the key consumers dedupe on
//	type                    Event.EventType
//	timestamp               Event.CreatedAt (AMQP timestamps have whole seconds)
//	correlation-id          the correlation_id header, when set
//	headers:
//	cloudEvents_specversion    1.0
//	cloudEvents_id             Event.ID
//	cloudEvents_type           Event.EventType
//	cloudEvents_source         Config.Source
//	cloudEvents_subject        Event.AggregateID (left out when empty)
//	cloudEvents_time           Event.CreatedAt, RFC 3339 with nanoseconds, UTC
//	cloudEvents_aggregatetype  Event.AggregateType (left out when empty)
//	cloudEvents_<name>         one extension per event header: correlationid, causationid,
//	                           schemaversion, and the others, named as internal/envelope
//	                           maps them (lowercase letters and digits only)
//	traceparent, tracestate    the W3C trace context, under the plain names OpenTelemetry's
//	                           propagator reads from AMQP headers
//
// The binding defines the attributes for AMQP 1.0 application properties,
// which RabbitMQ maps to and from the AMQP 0-9-1 headers table, so AMQP
// 1.0 consumers of the same queue see them there. It allows the prefix
// cloudEvents_ or cloudEvents: and prefers the underscore, which JMS
// message selectors can name; amqp091 accepts both in header names. Set
// Config.PropertyPrefix to PrefixColon for consumers built on older
// CloudEvents SDKs that read only cloudEvents:. All values are strings, the
// canonical form the binding allows for every attribute type.
//
// # Delivery
//
// Delivery is at least once. The sink counts an event delivered only when
// the broker has confirmed it (publisher confirms): for a persistent message
// on a durable queue, that is once the queue has written it to disk. A batch
// is published back to back on one channel and its confirms awaited together
// (up to 1000 unconfirmed at once), so it costs about one round trip. After
// a relay crash or a lost confirm the same event is published again with the
// same message-id and cloudEvents_id: consumers drop duplicates on either,
// for example with a unique key on it in the consumer's own database.
//
// Events of one batch are published in order on one channel, so a queue
// receives them in that order; concurrent batches (RelayConfig.Workers > 1)
// and retries can reorder events.
//
// # Results
//
//   - Confirmed: nil.
//   - Returned as unroutable (no queue bound for the routing key): a
//     *ReturnError, retryable by default, because the usual cause is a
//     consumer that has not declared its queue or binding yet and retries
//     then succeed; it names the exchange and routing key. With
//     Config.UnroutablePermanent (unroutable=permanent) it is permanent, so
//     a routing key nobody binds dead-letters at once; set that when
//     bindings exist before the relay runs.
//   - Nacked, unconfirmed when the channel or connection closed, the
//     exchange missing, or ctx ended: retryable.
//   - An event no broker accepts: a routing key (or event type, correlation
//     ID, header name) longer than the 255 bytes of an AMQP short string,
//     or an empty routing key on the default exchange: permanent; the other
//     events of the batch are still published.
//
// # Connection
//
// New connects and fails with one line naming the broker when it cannot.
// The sink then keeps one connection, with one confirm-mode channel per
// batch in flight. When the broker closes it or the network drops it
// (noticed at once on a reset, within two heartbeats on a silent network),
// a goroutine reconnects with exponential backoff (100ms up to 5s) until
// Close. Publish waits up to Config.ReconnectWait for a lost connection to
// come back before failing its batch with a retryable error, so a short
// outage costs no attempts. Passwords never appear in errors or logs: the
// broker is named by scheme, host, port and vhost only.
package amqpsink
