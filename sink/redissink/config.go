package redissink

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox/internal/sinkurl"
	"github.com/outboxkit/outbox/route"
)

// Defaults; Config.WithDefaults fills zero fields with them.
const (
	SourceDefault      = "/outbox"
	DialTimeoutDefault = 5 * time.Second
)

// Config configures a Sink.
type Config struct {
	// URL is the server, redis://[user:pass@]host[:port][/db] or rediss://…
	// for TLS. The query may hold go-redis connection options such as
	// read_timeout, write_timeout, pool_size or max_retries (see
	// redis.ParseURL). Required unless Client is set.
	URL string
	// Client, when set, is used instead of a client made from URL: a
	// cluster or failover client, or one with options URL cannot express.
	// The sink does not close it.
	Client redis.UniversalClient
	// MaxLen, when positive, trims every stream the sink writes to about
	// this many entries (XADD MAXLEN ~ n): Redis trims whole macro nodes, so
	// a stream may hold somewhat more. Zero keeps every entry.
	MaxLen int64
	// MaxLenExact trims to exactly MaxLen entries (MAXLEN = n), which costs
	// Redis more work on every XADD.
	MaxLenExact bool
	// Router picks each event's stream key. Defaults to route.New(""),
	// which routes to {aggregate_type|events}.{event_type}.
	Router *route.Router
	// Source is the CloudEvents source attribute, a URI reference naming
	// this outbox. Defaults to SourceDefault.
	Source string
	// TLS configures rediss connections: a private CA in RootCAs, a client
	// certificate in Certificates. Defaults to the system roots and the
	// URL's host as server name; ServerName, when empty, is the URL's host
	// still, and go-redis's skip_verify URL option still applies.
	// ConfigFromURL sets it from the tls_ options. A redis:// URL ignores
	// it.
	TLS *tls.Config
	// DialTimeout bounds connecting. Defaults to DialTimeoutDefault; the
	// URL's dial_timeout overrides it.
	DialTimeout time.Duration
	// Logger receives the sink's logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Source = cmp.Or(c.Source, SourceDefault)
	c.DialTimeout = cmp.Or(c.DialTimeout, DialTimeoutDefault)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// sinkParams are the URL query parameters ConfigFromURL moves into Config:
// the sink's own and the tls options, which redis.ParseURL would refuse.
var sinkParams = append([]string{"maxlen", "maxlen_exact", "route", "source"}, sinkurl.TLSOptions...)

// ConfigFromURL parses the sink URL form
//
//	redis[s]://[[user]:pass@]host[:port][/db][?option=value&…]
//
// into a Config. The options are maxlen (entries to keep per stream, about),
// maxlen_exact (true or false), route (a stream key template), source, and
// on rediss:// the TLS options tls_ca (a PEM file of the CA to trust
// instead of the system roots), tls_cert and tls_key (PEM files of a
// client certificate and its key) and tls_server_name (the name the
// server's certificate holds, when not the URL's host); their files are
// read now, into Config.TLS. A redis:// URL refuses them: use rediss://
// for TLS. These options are removed from Config.URL, which keeps the
// go-redis connection options. Errors never quote the password.
func ConfigFromURL(rawURL string) (Config, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return Config{}, err
	}
	q, err := sinkurl.Query(redactURL(u), u.RawQuery, sinkParams, false)
	if err != nil {
		return Config{}, err
	}
	var cfg Config
	if cfg.TLS, err = sinkurl.SchemeTLS(sinkurl.NewOptions(q), redactURL(u), u.Scheme == "rediss", "rediss", "redis"); err != nil {
		return Config{}, err
	}
	if cfg.TLS != nil && (cfg.TLS.RootCAs != nil || cfg.TLS.ServerName != "") {
		if v := q.Get("skip_verify"); v == "true" || v == "1" { // as go-redis reads it
			return Config{}, sinkurl.URLErrorf("%s: skip_verify=true turns off the verification tls_ca and tls_server_name are for: drop one", redactURL(u))
		}
	}
	if v := q.Get("maxlen"); v != "" {
		if cfg.MaxLen, err = strconv.ParseInt(v, 10, 64); err != nil || cfg.MaxLen < 0 {
			return Config{}, sinkurl.URLErrorf("%s: maxlen=%q: use a whole number of entries, or 0 to keep every entry", redactURL(u), v)
		}
	}
	if v := q.Get("maxlen_exact"); v != "" {
		if cfg.MaxLenExact, err = strconv.ParseBool(v); err != nil {
			return Config{}, sinkurl.URLErrorf("%s: maxlen_exact=%q is not a boolean: use true or false", redactURL(u), v)
		}
	}
	cfg.Source = q.Get("source")
	if cfg.Router, err = sinkurl.Route(q); err != nil {
		return Config{}, err
	}
	cfg.URL = sinkurl.Without(u, q, sinkParams)
	return cfg, nil
}

// parseURL parses and checks a server URL. Its errors never quote the
// userinfo.
func parseURL(raw string) (*url.URL, error) {
	bad := sinkurl.URLErrorf
	if raw == "" {
		return nil, bad("is empty: set the server, such as redis://localhost:6379/0")
	}
	u, err := sinkurl.Parse(raw, "use redis://user:pass@host:port/db, percent-encoding reserved characters in the user and password")
	if err != nil {
		return nil, err
	}
	switch {
	case u.Scheme != "redis" && u.Scheme != "rediss":
		return nil, bad("%s has scheme %q: use redis:// or rediss://", redactURL(u), u.Scheme)
	case u.Opaque != "" || u.Hostname() == "":
		return nil, bad("%s has no host: use redis://host:port/db", redactURL(u))
	case u.Fragment != "":
		return nil, bad("%s has a #fragment: remove it", redactURL(u))
	}
	if err := sinkurl.CheckPort(redactURL(u), u); err != nil {
		return nil, err
	}
	return u, nil
}

// options checks c, which has its defaults, and returns the client
// options for URL (nil when Client is set). Its errors never quote the
// password.
func (c Config) options() (*redis.Options, error) {
	bad := sinkurl.Errorf
	if err := sinkurl.CheckSource(c.Source); err != nil {
		return nil, err
	}
	switch {
	case c.MaxLen < 0:
		return nil, bad("MaxLen", "is %d: use a positive number of entries, or 0 to keep every entry", c.MaxLen)
	case c.MaxLenExact && c.MaxLen == 0:
		return nil, bad("MaxLenExact", "is set but MaxLen is 0: set MaxLen too, or drop MaxLenExact")
	case c.DialTimeout < 0:
		return nil, bad("DialTimeout", "is %v: use a positive duration, or 0 for the default", c.DialTimeout)
	}
	if c.Client != nil {
		if c.URL != "" {
			return nil, bad("URL", "is set along with Client: set one of them")
		}
		return nil, nil
	}
	u, err := parseURL(c.URL)
	if err != nil {
		return nil, err
	}
	if err := sinkurl.RejectSinkOptions(redactURL(u), u.Query(), sinkParams); err != nil {
		return nil, err
	}
	hasDialTimeout := u.Query().Has("dial_timeout")
	opts, err := redis.ParseURL(c.URL)
	if err != nil {
		// The URL parsed above, so this names an option or the database;
		// go-redis does not quote the password there.
		return nil, bad("URL", "%s: %s", redactURL(u), strings.TrimPrefix(err.Error(), "redis: "))
	}
	if !hasDialTimeout {
		opts.DialTimeout = c.DialTimeout
	}
	if c.TLS != nil && opts.TLSConfig != nil {
		// Merge with what go-redis made of the URL: the host as server
		// name, TLS 1.2 at least, skip_verify.
		own := c.TLS.Clone()
		if own.ServerName == "" {
			own.ServerName = opts.TLSConfig.ServerName
		}
		if own.MinVersion == 0 {
			own.MinVersion = opts.TLSConfig.MinVersion
		}
		own.InsecureSkipVerify = own.InsecureSkipVerify || opts.TLSConfig.InsecureSkipVerify
		opts.TLSConfig = own
	}
	return opts, nil
}

// redactURL names a server for errors and logs: scheme, host, port and
// database, never the userinfo or query.
func redactURL(u *url.URL) string { return sinkurl.Redact(u, true) }

// endpoint names the server of raw for errors and logs, redacted.
func endpoint(raw string) string { return sinkurl.Endpoint(raw, true) }

// String describes c without the password, so a Config can be printed or
// logged.
func (c Config) String() string {
	return fmt.Sprintf("redissink.Config{URL: %s, MaxLen: %d, Source: %q}", endpoint(c.URL), c.MaxLen, c.Source)
}

// GoString is String, so %#v does not print the password either.
func (c Config) GoString() string { return c.String() }

// LogValue logs c without the password.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("url", endpoint(c.URL)),
		slog.Int64("maxlen", c.MaxLen),
		slog.String("source", c.Source),
	)
}
