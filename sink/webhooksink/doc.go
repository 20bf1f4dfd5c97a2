// Package webhooksink is an outbox.Sink that POSTs every event to an HTTP
// endpoint as a CloudEvents 1.0 event in HTTP binary content mode, signed
// with Standard Webhooks when a secret is configured.
//
//	sink, err := webhooksink.New(webhooksink.Config{
//		URL:    "https://hooks.example.com/outbox",
//		Secret: os.Getenv("WEBHOOK_SECRET"), // whsec_…
//	})
//	if err != nil {
//		return err
//	}
//	defer sink.Close()
//	relay, err := outbox.NewRelay(db, outbox.RelayConfig{Sink: sink})
//
// # The request
//
// One request per event. The body is the event's payload exactly as stored,
// with Content-Type: application/json. The event's other fields travel in
// headers:
//
//	ce-specversion    1.0
//	ce-id             Event.UniqueID(): the ID in decimal, qualified as
//	                  <tenant>:<id> by a relay serving several schemas
//	ce-type           Event.EventType
//	ce-source         Config.Source (default "/outbox")
//	ce-subject        Event.AggregateID (left out when empty)
//	ce-time           Event.CreatedAt in UTC, RFC 3339 with nanoseconds (left out when zero)
//	ce-aggregatetype  Event.AggregateType (left out when empty)
//	ce-tenant         Event.Tenant, the schema, from a relay serving tenants
//	ce-database       Event.Database, from a relay serving several databases
//	ce-<name>         one extension attribute per entry of Event.Headers, see below
//	traceparent       Event.Headers["traceparent"], the W3C trace context
//	tracestate        Event.Headers["tracestate"]
//	User-Agent        Config.UserAgent
//	plus Config.Headers, and the webhook-* signature headers below
//
// CloudEvents requires that source plus id be unique; event IDs are unique
// within one outbox table, so give each table (each relay deployment) its
// own Source when several deliver to the same endpoint.
//
// Values of ce-* headers are percent-encoded as the CloudEvents HTTP binding
// (1.0.2, section 3.1.3.2) requires: space, double quote, percent and every
// byte outside printable ASCII become %XX of their UTF-8 bytes. Plain ASCII
// values, the common case, are sent unchanged.
//
// # Event headers as extension attributes
//
// CloudEvents attribute names may only hold the characters a-z and 0-9, so
// each event header name is lowercased and every other character dropped:
//
//	correlation_id  →  ce-correlationid
//	causation_id    →  ce-causationid
//	schema_version  →  ce-schemaversion
//	X-Tenant        →  ce-xtenant
//
// A header is left out when its mapped name is empty, is a CloudEvents
// context attribute (id, source, specversion, type, datacontenttype,
// dataschema, subject, time, data) or aggregatetype, which this sink sets
// itself. When several headers map to the same name the one whose original
// name sorts first wins. Headers whose names map to traceparent or
// tracestate go out as the plain HTTP headers of the same name, which is how
// the CloudEvents distributed tracing extension travels over HTTP; a value
// that is not a valid HTTP header value is left out.
//
// # Signatures
//
// With Config.Secret set, every request carries the Standard Webhooks
// (https://www.standardwebhooks.com) headers:
//
//	webhook-id         Event.UniqueID() (the ID, qualified <tenant>:<id> by a relay serving
//	                   several schemas), the same on every retry so receivers drop duplicates on it
//	webhook-timestamp  the time of this attempt, in Unix seconds
//	webhook-signature  v1,<base64 of HMAC-SHA256(key, "<id>.<timestamp>.<body>")>
//
// A secret of the form whsec_<base64>, as Standard Webhooks libraries and
// Svix generate, is decoded: the key is the base64-decoded bytes, and the
// receiver verifies with the same whsec_ string. Any other secret is used as
// the key byte for byte; a receiver using the Standard Webhooks libraries
// then verifies with NewWebhookRaw([]byte(secret)), since their NewWebhook
// would base64-decode it.
//
// # Results
//
// A 2xx answer delivers the event. Redirects are not followed: a 3xx answer
// is a permanent error that says to configure the final URL. 408, 429, 5xx,
// timeouts, connection errors and a cancelled context are retryable; any
// other 4xx answer is permanent (the event is dead-lettered at once). Errors
// are *StatusError values for HTTP answers (find them with errors.As) and
// quote at most BodySnippetMax bytes of the response body.
//
// The requests of a batch are sent concurrently, at most Config.Concurrency
// at a time for the whole sink, so events of one aggregate can arrive out of
// order; receivers that care order by ce-time or ce-id, or set Concurrency
// to 1.
//
// # Batched requests
//
// With Config.Batch above 1, events go up to Batch to a request as a
// CloudEvents JSON batch (Content-Type application/cloudevents-batch+json,
// BatchContentType): a JSON array of the events in structured mode, each
// with the attributes above as members, traceparent and tracestate when
// set, and the payload embedded as data exactly as stored (data_base64 when
// it is not valid JSON). A 2xx answer delivers every event of the request,
// any other result fails them all; a request refused permanently (a
// redirect, a 4xx other than 408 and 429) is split, each of its events sent
// again alone, so that one event the endpoint rejects does not dead-letter
// the others. A signed request signs the whole body, with webhook-id
// "FIRST-LAST", the IDs of its first and last event.
//
// # Secrets
//
// The secret, the values of Config.Headers (such as an Authorization
// token) and the URL's password never appear in errors or in the String,
// GoString and LogValue output of Config and Sink; they, and the URL's path
// and query string, are also cut out of response bodies quoted in errors. Errors name the endpoint by scheme and
// host only ("https://hooks.example.com/…"), because webhook URLs often
// carry tokens in their path or query string; LogValue adds
// url_path_sha256, 8 hex digits of a hash of the rest, so that sinks
// posting to one host under different paths log apart.
package webhooksink
