// Package redissink is an outbox.Sink that appends events to Redis streams
// with XADD, one pipeline (one round trip) per batch.
//
//	cfg, err := redissink.ConfigFromURL("redis://:pass@redis:6379/0?maxlen=100000")
//	if err != nil {
//		return err
//	}
//	sink, err := redissink.New(ctx, cfg)
//	if err != nil {
//		return err // one line naming the server, never the password
//	}
//	defer sink.Close()
//	relay, err := outbox.NewRelay(db, outbox.RelayConfig{Sink: sink})
//
// # URL
//
//	redis://[[user]:pass@]host[:port][/db][?option=value&…]
//	rediss://…  (TLS)
//
// ConfigFromURL takes these options from the query:
//
//	maxlen        trim each stream to about this many entries (XADD MAXLEN ~ n); default 0, no trimming
//	maxlen_exact  true: trim to exactly maxlen (MAXLEN = n), which costs Redis more per XADD
//	route         the stream key template (see package route); default {aggregate_type|events}.{event_type}
//	source        the CloudEvents source attribute; default /outbox
//
// and on rediss:// URLs only (a redis:// URL refuses them) the TLS options,
// whose files are read now into Config.TLS:
//
//	tls_ca=FILE          PEM file of the CA that signed the server's certificate (default the system roots)
//	tls_cert=FILE        PEM client certificate, for a server with tls-auth-clients (with tls_key)
//	tls_key=FILE         PEM private key of tls_cert
//	tls_server_name=NAME the name the server's certificate holds, when not the URL's host
//	tls=true             redundant on rediss://
//
// It leaves go-redis's connection options in Config.URL (dial_timeout,
// read_timeout, write_timeout, pool_size, max_retries, skip_verify, … as
// redis.ParseURL reads them). For a cluster or a failover setup, build the
// go-redis client yourself and pass it as Config.Client.
//
// # Entries
//
// One entry per event, with an ID Redis assigns (XADD … *) in the stream
// the router picks: an event's outbox_topic header, else the first matching
// rule, else the default template. Redis Streams have no CloudEvents
// binding, so each entry carries the attributes under their CloudEvents
// names, as in the JSON event format, followed by the payload:
//
//	specversion      1.0
//	id               Event.ID in decimal: the key consumers dedupe on
//	type             Event.EventType
//	source           Config.Source
//	subject          Event.AggregateID (left out when empty)
//	time             Event.CreatedAt, RFC 3339 with nanoseconds, UTC
//	datacontenttype  application/json
//	aggregatetype    Event.AggregateType (left out when empty)
//	<name>           one field per event header: correlationid, causationid, schemaversion,
//	                 and the others, named as internal/envelope maps them (lowercase letters
//	                 and digits only)
//	traceparent      the W3C trace context, when the event has one
//	tracestate
//	data             the payload, byte for byte as stored (always the last field)
//
// # Delivery
//
// Delivery is at least once. The sink counts an event delivered when XADD
// has answered with the entry's ID: the entry is then in the server's
// memory, and as durable as the server's persistence settings (AOF with
// appendfsync always or everysec) make it. After a relay crash, a lost
// reply, or go-redis retrying a pipeline on a new connection, the same event
// is appended again under a new entry ID with the same id field: consumers
// (XREAD or consumer groups with XREADGROUP) drop duplicates on the id
// field, for example with a unique key on it in their own database.
//
// The entries of one batch are appended in order, so one stream receives
// them in that order; concurrent batches (RelayConfig.Workers > 1) and
// retries can reorder events.
//
// # Results
//
//   - Appended: nil.
//   - A stream key that holds another type of value (WRONGTYPE) or an
//     empty stream key: permanent; the other events of the batch are
//     appended.
//   - Any other server error (OOM, READONLY, NOPERM, LOADING…), a lost
//     connection or ctx ending: retryable, with a hint where one helps.
//
// # Connection
//
// New sends a PING and fails with one line naming the server when it cannot
// connect. The go-redis pool then replaces broken connections on the next
// command by itself, retrying a failed pipeline up to max_retries times
// (3 by default) with backoff before Publish reports the batch failed.
// Passwords never appear in errors or logs: the server is named by scheme,
// host, port and database only.
package redissink
