package amqpsink

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/internal/sinkurl"
	"github.com/outboxkit/outbox/route"
)

// Defaults; Config.WithDefaults fills zero fields with them.
const (
	SourceDefault         = "/outbox"
	ExchangeTypeDefault   = "topic"
	PropertyPrefixDefault = PrefixUnderscore
	DialTimeoutDefault    = 10 * time.Second
	HeartbeatDefault      = 10 * time.Second
	ReconnectWaitDefault  = 2 * time.Second
	ConnectionNameDefault = "outbox-relay"
)

// The two application-property prefixes the CloudEvents AMQP binding allows.
const (
	// PrefixUnderscore is the form the binding prefers: JMS 2.0 clients and
	// message selectors cannot name properties containing a colon.
	PrefixUnderscore = "cloudEvents_"
	// PrefixColon is the form of the binding's first versions, which older
	// CloudEvents SDKs read.
	PrefixColon = "cloudEvents:"
)

// Unroutable messages are retried or dead-lettered at once, see
// Config.UnroutablePermanent.
const (
	unroutableRetry     = "retry"
	unroutablePermanent = "permanent"
)

// Config configures a Sink.
type Config struct {
	// URL is the broker, amqp://user:pass@host:port/vhost or amqps://… for
	// TLS. Userinfo and vhost are percent-encoded ("/" as the vhost is %2F;
	// no path means the default vhost "/"). The query may hold the
	// connection parameters amqp091 understands: heartbeat,
	// connection_timeout, channel_max, auth_mechanism, certfile, keyfile,
	// cacertfile and server_name_indication. ConfigFromURL also takes the
	// sink options from the query. Required.
	URL string
	// Exchange receives every message. Empty means the default exchange,
	// where the routing key is the name of the queue that gets the message.
	Exchange string
	// ExchangeType is the type DeclareExchange declares: topic, direct,
	// fanout or headers. Defaults to ExchangeTypeDefault.
	ExchangeType string
	// DeclareExchange makes New declare Exchange (durable, not
	// auto-deleted) when it is missing. Without it a missing exchange is a
	// retryable publish error naming the exchange.
	DeclareExchange bool
	// Router picks each event's routing key. Defaults to route.New(""),
	// which routes to {aggregate_type|events}.{event_type}.
	Router *route.Router
	// Source is the CloudEvents source attribute, a URI reference naming
	// this outbox. Defaults to SourceDefault.
	Source string
	// UnroutablePermanent dead-letters at once an event the broker returns
	// as unroutable (no queue is bound for its routing key). By default it
	// is retried with backoff, because the usual cause is a consumer that
	// has not declared its queue yet; set it when every binding exists
	// before the relay runs, so a routing key nobody binds fails fast.
	UnroutablePermanent bool
	// PropertyPrefix prefixes the CloudEvents attributes in the message
	// headers: PrefixUnderscore or PrefixColon. Defaults to
	// PropertyPrefixDefault.
	PropertyPrefix string
	// TLS configures amqps connections. Defaults to the system roots and
	// the URL's host as server name, or the URL's cacertfile, certfile and
	// keyfile when set.
	TLS *tls.Config
	// DialTimeout bounds connecting: TCP, TLS and the AMQP handshake.
	// Defaults to DialTimeoutDefault.
	DialTimeout time.Duration
	// Heartbeat is the AMQP heartbeat interval, which detects a dead
	// broker on a silent connection. Defaults to HeartbeatDefault; the
	// URL's heartbeat parameter overrides it.
	Heartbeat time.Duration
	// ReconnectWait is how long Publish waits for a lost connection to come
	// back before failing its batch with a retryable error. Defaults to
	// ReconnectWaitDefault.
	ReconnectWait time.Duration
	// ConnectionName names the connection in the RabbitMQ management UI.
	// Defaults to ConnectionNameDefault.
	ConnectionName string
	// Logger receives connection losses and reconnects. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.ExchangeType = cmp.Or(c.ExchangeType, ExchangeTypeDefault)
	c.Source = cmp.Or(c.Source, SourceDefault)
	c.PropertyPrefix = cmp.Or(c.PropertyPrefix, PropertyPrefixDefault)
	c.DialTimeout = cmp.Or(c.DialTimeout, DialTimeoutDefault)
	c.Heartbeat = cmp.Or(c.Heartbeat, HeartbeatDefault)
	c.ReconnectWait = cmp.Or(c.ReconnectWait, ReconnectWaitDefault)
	c.ConnectionName = cmp.Or(c.ConnectionName, ConnectionNameDefault)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// connectionParams are the URL query parameters amqp091 reads itself.
var connectionParams = []string{
	"heartbeat", "connection_timeout", "channel_max", "auth_mechanism",
	"certfile", "keyfile", "cacertfile", "server_name_indication",
}

// sinkParams are the URL query parameters ConfigFromURL moves into Config.
var sinkParams = []string{
	"exchange", "exchange_type", "declare_exchange", "route", "source",
	"unroutable", "property_prefix", "connection_name",
}

// ConfigFromURL parses the sink URL form
//
//	amqp[s]://[user:pass@]host[:port][/vhost][?option=value&…]
//
// into a Config. The options are exchange, exchange_type,
// declare_exchange (true or false), route (a routing key template),
// source, unroutable (retry or permanent), property_prefix and
// connection_name; they are removed from Config.URL, which keeps the
// connection parameters amqp091 reads (heartbeat, connection_timeout, …).
// Errors never quote the password.
func ConfigFromURL(rawURL string) (Config, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return Config{}, err
	}
	q, err := sinkurl.Query(redactURL(u), u.RawQuery, append(slices.Clone(sinkParams), connectionParams...), true)
	if err != nil {
		return Config{}, err
	}
	var cfg Config
	cfg.Exchange = q.Get("exchange")
	cfg.ExchangeType = q.Get("exchange_type")
	cfg.Source = q.Get("source")
	cfg.PropertyPrefix = q.Get("property_prefix")
	cfg.ConnectionName = q.Get("connection_name")
	if v := q.Get("declare_exchange"); v != "" {
		if cfg.DeclareExchange, err = strconv.ParseBool(v); err != nil {
			return Config{}, sinkurl.URLErrorf("%s: declare_exchange=%q is not a boolean: use true or false", redactURL(u), v)
		}
	}
	switch v := q.Get("unroutable"); v {
	case "", unroutableRetry:
	case unroutablePermanent:
		cfg.UnroutablePermanent = true
	default:
		return Config{}, sinkurl.URLErrorf("%s: unroutable=%q: use retry or permanent", redactURL(u), v)
	}
	if cfg.Router, err = sinkurl.Route(q); err != nil {
		return Config{}, err
	}
	cfg.URL = sinkurl.Without(u, q, sinkParams)
	return cfg, nil
}

// parseURL parses and checks a broker URL. Its errors never quote the
// userinfo.
func parseURL(raw string) (*url.URL, error) {
	bad := sinkurl.URLErrorf
	if raw == "" {
		return nil, bad("is empty: set the broker, such as amqp://guest:guest@localhost:5672/")
	}
	u, err := sinkurl.Parse(raw, "use amqp://user:pass@host:port/vhost, percent-encoding reserved characters in the user, password and vhost")
	if err != nil {
		return nil, err
	}
	switch {
	case u.Scheme != "amqp" && u.Scheme != "amqps":
		return nil, bad("%s has scheme %q: use amqp:// or amqps://", redactURL(u), u.Scheme)
	case u.Opaque != "":
		return nil, bad("%s has no //host: use amqp://host:port/vhost", redactURL(u))
	case u.Hostname() == "":
		return nil, bad("%s has no host: use amqp://host:port/vhost", redactURL(u))
	case u.Fragment != "":
		return nil, bad("%s has a #fragment: remove it", redactURL(u))
	case strings.ContainsAny(raw, " \t\r\n"):
		return nil, bad("%s contains whitespace: percent-encode it", redactURL(u))
	}
	if err := sinkurl.CheckPort(redactURL(u), u); err != nil {
		return nil, err
	}
	if strings.Count(strings.TrimPrefix(u.EscapedPath(), "/"), "/") > 0 {
		return nil, bad("%s: the vhost holds an unescaped /: write it as %%2F", redactURL(u))
	}
	return u, nil
}

// validate checks c, which has its defaults. Its errors never quote the
// password.
func (c Config) validate() error {
	bad := sinkurl.Errorf
	u, err := parseURL(c.URL)
	if err != nil {
		return err
	}
	if _, err := amqp.ParseURI(c.URL); err != nil {
		// The URL parsed above, so this is a bad connection parameter
		// such as heartbeat=x; the error does not quote the URL.
		return bad("URL", "%s: %v", redactURL(u), err)
	}
	if err := sinkurl.RejectSinkOptions(redactURL(u), u.Query(), sinkParams); err != nil {
		return err
	}
	for name := range u.Query() {
		if !slices.Contains(connectionParams, name) {
			return bad("URL", "%s: unknown connection parameter %q: use one of %s", redactURL(u), name, strings.Join(connectionParams, ", "))
		}
	}
	if !validName(c.Exchange) {
		return bad("Exchange", "%q is not a valid exchange name: use at most 255 letters, digits, -, _, . and :", c.Exchange)
	}
	switch c.ExchangeType {
	case "topic", "direct", "fanout", "headers":
	default:
		if !strings.HasPrefix(c.ExchangeType, "x-") {
			return bad("ExchangeType", "%q: use topic, direct, fanout, headers or a plugin type starting with x-", c.ExchangeType)
		}
	}
	if c.DeclareExchange && c.Exchange == "" {
		return bad("DeclareExchange", "is set but Exchange is empty: the default exchange always exists; name an exchange or drop the option")
	}
	if err := sinkurl.CheckSource(c.Source); err != nil {
		return err
	}
	if c.PropertyPrefix != PrefixUnderscore && c.PropertyPrefix != PrefixColon {
		return bad("PropertyPrefix", "%q: use %q or %q, the two the CloudEvents AMQP binding allows", c.PropertyPrefix, PrefixUnderscore, PrefixColon)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"DialTimeout", c.DialTimeout}, {"Heartbeat", c.Heartbeat}, {"ReconnectWait", c.ReconnectWait}} {
		if d.v < 0 {
			return bad(d.field, "is %v: use a positive duration, or 0 for the default", d.v)
		}
	}
	return nil
}

// validName reports whether s is a valid AMQP exchange or queue name: a
// short string of the characters RabbitMQ accepts.
func validName(s string) bool {
	if len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// redactURL names a broker for errors and logs: scheme, host, port and
// vhost, never the userinfo or query (which may hold key file paths).
func redactURL(u *url.URL) string { return sinkurl.Redact(u, true) }

// endpoint names the broker of raw for errors and logs, redacted.
func endpoint(raw string) string { return sinkurl.Endpoint(raw, true) }

// String describes c without the password, so a Config can be printed or
// logged.
func (c Config) String() string {
	return fmt.Sprintf("amqpsink.Config{URL: %s, Exchange: %q, Source: %q}", endpoint(c.URL), c.Exchange, c.Source)
}

// GoString is String, so %#v does not print the password either.
func (c Config) GoString() string { return c.String() }

// LogValue logs c without the password.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("url", endpoint(c.URL)),
		slog.String("exchange", c.Exchange),
		slog.String("source", c.Source),
	)
}
