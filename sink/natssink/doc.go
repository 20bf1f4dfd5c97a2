// Package natssink is an outbox.Sink that publishes events to NATS
// JetStream, one message per event, as CloudEvents in the NATS binding's
// binary content mode.
//
//	cfg, err := natssink.ConfigFromURL("nats://127.0.0.1:4222?stream=ORDERS&create_stream=true&stream_subjects=order.>")
//	if err != nil {
//		return err
//	}
//	sink, err := natssink.New(ctx, cfg)
//	if err != nil {
//		return err // one line: the server is down, refuses the credentials, has no JetStream…
//	}
//	defer sink.Close()
//	relay, err := outbox.NewRelay(db, outbox.RelayConfig{Sink: sink})
//
// # The URL
//
//	nats://[user:pass@ | token@]host[:port][,host[:port]…][?option=value&…]
//
// The port defaults to 4222. Several hosts form the seed list of a
// cluster. A user name with a password authenticates with both; a user
// name alone is a token. Percent-encode reserved characters in them. The
// options, all optional:
//
//	tls=true               connect with TLS (implied by any other tls_ option)
//	tls_ca=FILE            PEM file of the CA that signed the server's certificate
//	tls_cert=FILE          PEM client certificate for mutual TLS (with tls_key)
//	tls_key=FILE           PEM private key of tls_cert
//	tls_server_name=NAME   name to verify the server's certificate against
//	creds=FILE             NATS credentials file (user JWT and NKey seed)
//	stream=NAME            the stream every message must land in (Config.Stream)
//	create_stream=true     create the stream when missing (Config.CreateStream)
//	stream_subjects=A,B    subjects of a created stream, such as order.>,user.>
//	duplicate_window=2m    duplicate window of a created stream
//	route=TEMPLATE         subject template (package route), such as app.{event_type}
//	source=URI             CloudEvents source attribute (default /outbox)
//	name=NAME              connection name shown by the server (default outbox-natssink)
//	connect_timeout=5s     bound on dialing one server
//	ack_timeout=5s         bound on waiting for one message's ack
//	reconnect_wait=1s      pause between reconnect attempts
//	max_pending=4096       most unacknowledged messages at once
//
// # Subjects
//
// Config.Router picks each event's subject, by default
// {aggregate_type|events}.{event_type} (order.created for an event of type
// created on an order aggregate; see package route for templates, rules and
// the per-event outbox_topic header). A subject that cannot be published to
// fails its event permanently, without failing the rest of the batch: an
// empty one, one with whitespace or an empty token (a.b., a..b), a wildcard
// token (* or >) or a leading $ (the system APIs $JS, $SYS, $KV).
//
// Every subject must be stored by a JetStream stream. A publish that no
// stream answers ("no responders") is retried NoStreamRetries times, then
// fails permanently with ErrNoStream, naming the subject: add the subject
// to a stream (or set create_stream and stream_subjects) and retry the
// dead-lettered events.
//
// # The message
//
// The data is the event's payload exactly as stored. The other fields
// travel in headers, following the CloudEvents NATS protocol binding
// (binary content mode, which needs NATS 2.2 or later):
//
//	ce-specversion      1.0
//	ce-id               Event.UniqueID(): the ID in decimal, qualified as
//	                    <tenant>:<id> by a relay serving several schemas
//	ce-type             Event.EventType
//	ce-source           Config.Source (default /outbox)
//	ce-subject          Event.AggregateID (left out when empty)
//	ce-time             Event.CreatedAt in UTC, RFC 3339 with nanoseconds
//	ce-datacontenttype  application/json
//	ce-aggregatetype    Event.AggregateType (left out when empty)
//	ce-tenant           Event.Tenant, the schema, from a relay serving
//	                    tenants (left out otherwise); ce-database alike
//	ce-<name>           one extension attribute per event header, such as
//	                    ce-correlationid, ce-causationid, ce-schemaversion
//	traceparent         the W3C trace context, when the event carries one
//	tracestate
//	Nats-Msg-Id         Event.UniqueID(): JetStream's deduplication ID, so
//	                    tenants whose IDs repeat share a stream safely
//	Nats-Expected-Stream  Config.Stream, when set: JetStream refuses the
//	                    message if another stream would store it
//
// Header names map to attribute names by lowercasing them and dropping
// every character but a-z and 0-9 (correlation_id becomes correlationid).
// ce- values are percent-encoded as the binding requires (space, double
// quote, percent and non-ASCII bytes become %XX); plain ASCII values are
// sent as they are. There is no Content-Type header: in the NATS binding
// one of application/cloudevents would mean structured mode.
//
// # Delivery and deduplication
//
// Publish sends a whole batch asynchronously and then waits for every
// message's JetStream ack, so a batch costs one round trip, not one per
// event. An event is reported delivered only once JetStream acknowledged
// storing it. Delivery is at least once: a relay that dies after publishing
// and before marking its events publishes them again once their lease
// ends. Because every message carries Nats-Msg-Id = event ID, JetStream
// drops such re-publishes inside the stream's duplicate window (two minutes
// by default; keep it longer than the relay's lease). Consumers that must
// be exact beyond the window dedupe on ce-id (with ce-source, when several
// outboxes share a stream), for example with package inbox.
//
// While the connection is down the client reconnects forever, every
// ReconnectWait, and publishes fail at once with a retryable error (there
// is no reconnect buffer that would send them late). Missing acks fail
// after AckTimeout, retryably, and Publish returns as soon as its context
// ends. JetStream errors that judge the message (4xx, such as a message
// over the stream's max_msg_size or a message too large for the server's
// max_payload) are permanent.
//
// # Credentials
//
// The password, token and credentials never appear in errors, logs or the
// String, GoString and LogValue output of Config and Sink.
package natssink
