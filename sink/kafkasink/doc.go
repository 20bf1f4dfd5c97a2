// Package kafkasink is an outbox.Sink that produces events to Kafka with
// franz-go, one record per event, as CloudEvents in the Kafka binding's
// binary content mode.
//
//	cfg, err := kafkasink.ConfigFromURL("kafka://broker-1:9092,broker-2:9092?route=shop.{aggregate_type}")
//	if err != nil {
//		return err
//	}
//	sink, err := kafkasink.New(ctx, cfg)
//	if err != nil {
//		return err // one line: no broker answers, the credentials were refused…
//	}
//	defer sink.Close()
//	relay, err := outbox.NewRelay(db, outbox.RelayConfig{Sink: sink})
//
// # The URL
//
//	kafka://[user:pass@]host[:port][,host[:port]…][?option=value&…]
//
// The port defaults to 9092; the hosts are seed brokers, from which the
// client discovers the cluster. A user name and password need the sasl
// option. Percent-encode reserved characters in them. The options, all
// optional:
//
//	tls=true                 connect with TLS (implied by any other tls_ option)
//	tls_ca=FILE              PEM file of the CA that signed the brokers' certificates
//	tls_cert=FILE            PEM client certificate for mutual TLS (with tls_key)
//	tls_key=FILE             PEM private key of tls_cert
//	tls_server_name=NAME     name to verify the brokers' certificates against
//	sasl=MECHANISM           plain, scram-sha-256 or scram-sha-512, for user:pass@
//	route=TEMPLATE           topic template (package route), such as shop.{aggregate_type}
//	source=URI               CloudEvents source attribute (default /outbox)
//	client_id=NAME           client ID the brokers see (default outbox-kafkasink)
//	auto_create_topics=true  let a produce create a missing topic, where the brokers allow it
//	max_record_bytes=N       largest record batch (default 1000012, Kafka's max.message.bytes)
//	compression=CODEC        none, gzip, snappy (default), lz4 or zstd
//	linger=10ms              wait this long for more records per partition (default 10ms; 0 sends at once; up to 1m)
//	connect_timeout=10s      bound on New's check that a broker answers
//	delivery_timeout=30s     fail records unacknowledged this long (default: the Publish context)
//
// # Topics and keys
//
// Config.Router picks each event's topic, by default
// {aggregate_type|events}.{event_type} (see package route for templates,
// rules and the per-event outbox_topic header). A topic that is not a legal
// Kafka topic name (empty, longer than 249 bytes, "." or "..", or with
// characters other than ASCII letters, digits, ".", "_" and "-") fails its
// event permanently without failing the rest of the batch, and so does a
// topic that does not exist (unless AutoCreateTopics is set and the brokers
// create it): create the topic, then retry the dead-lettered events.
//
// The record key is the event's aggregate ID, so all events of one
// aggregate go to one partition and stay in order there (the default
// partitioner hashes keys like the Java client). An event without an
// aggregate ID has no key and goes to any partition.
//
// # The record
//
// The value is the event's payload exactly as stored. The other fields
// travel in headers, following the CloudEvents Kafka protocol binding
// (binary content mode); values are the UTF-8 bytes of each attribute:
//
//	ce_specversion    1.0
//	ce_id             Event.ID, in decimal
//	ce_type           Event.EventType
//	ce_source         Config.Source (default /outbox)
//	ce_subject        Event.AggregateID (left out when empty)
//	ce_time           Event.CreatedAt in UTC, RFC 3339 with nanoseconds
//	content-type      application/json (the datacontenttype attribute)
//	ce_aggregatetype  Event.AggregateType (left out when empty)
//	ce_<name>         one extension attribute per event header, such as
//	                  ce_correlationid, ce_causationid, ce_schemaversion
//	traceparent       the W3C trace context, when the event carries one
//	tracestate
//	key               Event.AggregateID (no key when empty)
//
// Header names map to attribute names by lowercasing them and dropping
// every character but a-z and 0-9 (correlation_id becomes correlationid).
//
// # Delivery and deduplication
//
// The producer is idempotent and waits for acks from all in-sync replicas
// (acks=all), so retries inside the client never duplicate or reorder a
// partition's records. Publish produces a whole batch at once and then
// waits for every record's ack; an event is reported delivered only once
// the brokers acknowledged it. When the brokers are unreachable the client
// keeps reconnecting by itself, and Publish returns retryable errors when
// its context (the relay's sink timeout) or DeliveryTimeout ends. Too large
// records and illegal or missing topics are permanent errors.
//
// Delivery is at least once: a relay that dies after producing and before
// marking its events, or a Publish that gave up on a record the brokers
// stored after all, leads to the event being produced again. Kafka has no
// broker-side deduplication across producers, so consumers dedupe on the
// ce_id header (with ce_source, when several outboxes share a topic), for
// example with package inbox.
//
// # Testing
//
// The package's tests run against an in-process kfake cluster. Set
// OUTBOX_TEST_KAFKA_BROKERS to a comma-separated list of brokers to run the
// same tests against a real cluster that allows creating and deleting
// topics; the tests that need kfake's fault injection say so when they
// skip part of their checks.
//
// # Credentials
//
// The password never appears in errors, logs or the String, GoString and
// LogValue output of Config and Sink.
package kafkasink
