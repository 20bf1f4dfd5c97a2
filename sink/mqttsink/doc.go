// Package mqttsink is an outbox.Sink that publishes events to an MQTT
// broker with QoS 1, as CloudEvents in the MQTT binding's structured
// content mode, over MQTT 3.1.1 (github.com/eclipse/paho.mqtt.golang).
//
//	cfg, err := mqttsink.ConfigFromURL("mqtts://relay:pass@mqtt:8883?route=shop%2F%7Baggregate_type%7D%2F%7Bevent_type%7D")
//	if err != nil {
//		return err
//	}
//	sink, err := mqttsink.New(ctx, cfg)
//	if err != nil {
//		return err // one line naming the broker, never the password
//	}
//	defer sink.Close()
//	relay, err := outbox.NewRelay(db, outbox.RelayConfig{Sink: sink})
//
// # URL
//
//	mqtt://[user[:pass]@]host[:port][?option=value&…]   (tcp:// too; port 1883 by default)
//	mqtts://…  (ssl://, tls://; TLS, port 8883 by default)
//
// ConfigFromURL takes these options from the query:
//
//	client_id        the MQTT client ID; default outbox-relay-<random>. The broker drops an
//	                 older connection with the same ID, so give every relay its own
//	route            the topic template (see package route); default {aggregate_type|events}.{event_type}.
//	                 MQTT topics are slash-separated: {aggregate_type}/{event_type} is idiomatic
//	source           the CloudEvents source attribute; default /outbox
//	keepalive        the MQTT keep-alive interval; default 30s
//	connect_timeout  bound on connecting; default 10s
//
// and on TLS URLs only (a plain mqtt:// or tcp:// URL refuses them) the TLS
// options, whose files are read now into Config.TLS:
//
//	tls_ca=FILE           PEM file of the CA that signed the broker's certificate (default the system roots)
//	tls_cert=FILE         PEM client certificate, for a broker with require_certificate (with tls_key)
//	tls_key=FILE          PEM private key of tls_cert
//	tls_server_name=NAME  the name the broker's certificate holds, when not the URL's host
//	tls=true              redundant on mqtts://
//
// # Messages
//
// One message per event, QoS 1, not retained, on the topic the router picks:
// an event's outbox_topic header, else the first matching rule, else the
// default template.
//
// MQTT 3.1.1 has no message properties, so the CloudEvents MQTT binding
// allows only structured content mode there: the message is a CloudEvents
// JSON event (media type application/cloudevents+json). Its members, in this
// order:
//
//	specversion      1.0
//	id               Event.ID in decimal: the key consumers dedupe on
//	type             Event.EventType
//	source           Config.Source
//	subject          Event.AggregateID (left out when empty)
//	time             Event.CreatedAt, RFC 3339 with nanoseconds, UTC
//	datacontenttype  application/json
//	aggregatetype    Event.AggregateType (left out when empty)
//	<name>           one string member per event header: correlationid, causationid,
//	                 schemaversion, and the others, named as internal/envelope maps them
//	traceparent      the W3C trace context (CloudEvents distributed tracing extension)
//	tracestate
//	data             the payload, embedded byte for byte as stored (keys, number
//	                 spelling and whitespace kept), or, when it is not valid JSON,
//	data_base64      the payload in standard base64
//
// Why 3.1.1 and not MQTT 5, whose user properties would carry the binary
// mode: the Go MQTT 5 client (github.com/eclipse/paho.golang) is not yet a
// release this project may depend on, while the 3.1.1 client is mature and
// every MQTT 5 broker also speaks 3.1.1. A later MQTT 5 mode can add binary
// content mode without changing this one.
//
// # Delivery
//
// Delivery is at least once. The sink counts an event delivered when the
// broker has acknowledged it (PUBACK): the broker then owns it, and hands it
// to subscribers with QoS 1 sessions even across their reconnects
// (persistent sessions). All messages of a batch are sent before any
// acknowledgement is awaited, so a batch costs about one round trip. After a
// relay crash or a lost PUBACK the same event is published again with the
// same id member: consumers drop duplicates on it, for example with a unique
// key on it in their own database.
//
// QoS 2 is not offered: its exactly-once holds only between the sink and
// the broker (a relay may still publish an event twice), and brokers bound
// the QoS 2 messages in flight per client (the Eclipse broker silently drops what a
// 3.1.1 client sends beyond max_inflight_messages).
//
// An MQTT 3.1.1 broker cannot refuse a message: one its ACL forbids is still
// acknowledged, and dropped. Check the ACL grants the relay's user publish
// rights on every topic the routes produce.
//
// # Results
//
//   - Acknowledged: nil.
//   - A topic MQTT cannot carry (empty, holding the wildcards + or #,
//     starting with $, longer than 65535 bytes, invalid UTF-8 or NUL):
//     permanent; the other events of the batch are still published.
//   - Unacknowledged when the connection was lost or ctx ended, or the
//     sink not connected: retryable.
//
// # Connection
//
// New connects (clean session) and fails with one line naming the broker
// when it cannot. When the connection is lost (noticed at once on a reset,
// within about 1.5 keep-alive intervals on a silent network), messages in
// flight fail at once and a goroutine reconnects with exponential backoff
// (100ms up to 5s) until Close. Publish waits up to Config.ReconnectWait
// for a lost connection to come back before failing its batch with a
// retryable error. Passwords never appear in errors or logs: the broker is
// named by scheme, host and port only.
package mqttsink
