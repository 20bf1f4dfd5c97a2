package mqttsink

import (
	"cmp"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/outbox/internal/sinkurl"
	"github.com/outboxkit/outbox/route"
)

// Defaults; Config.WithDefaults fills zero fields with them.
const (
	SourceDefault        = "/outbox"
	DialTimeoutDefault   = 10 * time.Second
	KeepAliveDefault     = 30 * time.Second
	ReconnectWaitDefault = 2 * time.Second
	// ClientIDPrefixDefault starts the random client ID used when
	// Config.ClientID is empty.
	ClientIDPrefixDefault = "outbox-relay-"
)

// schemes are the URL schemes New accepts; the TLS ones are mqtts and ssl.
var schemes = []string{"mqtt", "tcp", "mqtts", "ssl", "tls"}

func isTLS(scheme string) bool { return scheme == "mqtts" || scheme == "ssl" || scheme == "tls" }

// Config configures a Sink.
type Config struct {
	// URL is the broker, mqtt://[user:pass@]host[:port] (tcp:// too), or
	// mqtts:// (ssl://, tls://) for TLS. The port defaults to 1883, or 8883
	// with TLS. ConfigFromURL also takes the sink options from the query;
	// New accepts none. Required.
	URL string
	// ClientID identifies the connection to the broker, which disconnects
	// an older connection with the same ID: give every relay its own.
	// Defaults to ClientIDPrefixDefault and 16 random hex digits.
	ClientID string
	// Router picks each event's topic. Defaults to route.New(""), which
	// routes to {aggregate_type|events}.{event_type}; use a template such
	// as "{aggregate_type}/{event_type}" for MQTT's slash-separated
	// hierarchy.
	Router *route.Router
	// Source is the CloudEvents source attribute, a URI reference naming
	// this outbox. Defaults to SourceDefault.
	Source string
	// TLS configures mqtts connections: a private CA in RootCAs, a client
	// certificate in Certificates. Defaults to the system roots and the
	// URL's host as server name. ConfigFromURL sets it from the tls_
	// options. A plain mqtt:// URL ignores it.
	TLS *tls.Config
	// DialTimeout bounds connecting: TCP, TLS and the MQTT CONNECT
	// handshake. Defaults to DialTimeoutDefault.
	DialTimeout time.Duration
	// KeepAlive is the MQTT keep-alive interval, which detects a dead
	// broker on a silent connection. Defaults to KeepAliveDefault.
	KeepAlive time.Duration
	// ReconnectWait is how long Publish waits for a lost connection to come
	// back before failing its batch with a retryable error. Defaults to
	// ReconnectWaitDefault.
	ReconnectWait time.Duration
	// Logger receives connection losses and reconnects. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.ClientID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.ClientID = ClientIDPrefixDefault + hex.EncodeToString(b[:])
	}
	c.Source = cmp.Or(c.Source, SourceDefault)
	c.DialTimeout = cmp.Or(c.DialTimeout, DialTimeoutDefault)
	c.KeepAlive = cmp.Or(c.KeepAlive, KeepAliveDefault)
	c.ReconnectWait = cmp.Or(c.ReconnectWait, ReconnectWaitDefault)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// sinkParams are the URL query parameters ConfigFromURL moves into Config.
var sinkParams = append([]string{"client_id", "route", "source", "keepalive", "connect_timeout"}, sinkurl.TLSOptions...)

// ConfigFromURL parses the sink URL form
//
//	mqtt://[user[:pass]@]host[:port][?option=value&…]
//	mqtts://…, ssl://…  (TLS)
//
// into a Config. The options are client_id, route (a topic template),
// source, keepalive and connect_timeout (durations such as 30s), and on
// TLS URLs the TLS options tls_ca (a PEM file of the CA to trust instead of
// the system roots), tls_cert and tls_key (PEM files of a client
// certificate and its key) and tls_server_name (the name the broker's
// certificate holds, when not the URL's host); their files are read now,
// into Config.TLS. A plain URL refuses them: use mqtts:// for TLS. The
// options are removed from Config.URL. Errors never quote the password.
func ConfigFromURL(rawURL string) (Config, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return Config{}, err
	}
	q, err := sinkurl.Query(redactURL(u), u.RawQuery, sinkParams, true)
	if err != nil {
		return Config{}, err
	}
	var cfg Config
	if cfg.TLS, err = sinkurl.SchemeTLS(sinkurl.NewOptions(q), redactURL(u), isTLS(u.Scheme), "mqtts", "mqtt"); err != nil {
		return Config{}, err
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{"keepalive", &cfg.KeepAlive}, {"connect_timeout", &cfg.DialTimeout}} {
		if v := q.Get(d.name); v != "" {
			if *d.dst, err = time.ParseDuration(v); err != nil || *d.dst <= 0 {
				return Config{}, sinkurl.URLErrorf("%s: %s=%q: use a positive duration such as 30s", redactURL(u), d.name, v)
			}
		}
	}
	cfg.ClientID = q.Get("client_id")
	cfg.Source = q.Get("source")
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
		return nil, bad("is empty: set the broker, such as mqtt://localhost:1883")
	}
	u, err := sinkurl.Parse(raw, "use mqtt://user:pass@host:port, percent-encoding reserved characters in the user and password")
	if err != nil {
		return nil, err
	}
	switch {
	case !slices.Contains(schemes, u.Scheme):
		return nil, bad("%s has scheme %q: use mqtt:// or mqtts:// (tcp://, ssl:// and tls:// work too)", redactURL(u), u.Scheme)
	case u.Opaque != "" || u.Hostname() == "":
		return nil, bad("%s has no host: use mqtt://host:port", redactURL(u))
	case u.Path != "" && u.Path != "/":
		return nil, bad("%s has a path: MQTT URLs name only a host and port; set topics with the route option", redactURL(u))
	case u.Fragment != "":
		return nil, bad("%s has a #fragment: remove it", redactURL(u))
	}
	if err := sinkurl.CheckPort(redactURL(u), u); err != nil {
		return nil, err
	}
	return u, nil
}

// validate checks c, which has its defaults, and returns the broker URL
// for paho (scheme and host only). Its errors never quote the password.
func (c Config) validate() (*url.URL, error) {
	bad := sinkurl.Errorf
	u, err := parseURL(c.URL)
	if err != nil {
		return nil, err
	}
	if u.RawQuery != "" {
		return nil, bad("URL", "%s has a query: parse the URL with ConfigFromURL, or set the Config fields", redactURL(u))
	}
	switch {
	case c.ClientID == "" || len(c.ClientID) > 65535 || !utf8.ValidString(c.ClientID) || strings.ContainsRune(c.ClientID, 0):
		return nil, bad("ClientID", "%q is not a valid MQTT client ID: use printable UTF-8, such as orders-relay-1", c.ClientID)
	case c.DialTimeout < 0:
		return nil, bad("DialTimeout", "is %v: use a positive duration, or 0 for the default", c.DialTimeout)
	case c.KeepAlive < 0 || c.KeepAlive > 0 && c.KeepAlive < time.Second:
		return nil, bad("KeepAlive", "is %v: use at least 1s, or 0 for the default", c.KeepAlive)
	case c.ReconnectWait < 0:
		return nil, bad("ReconnectWait", "is %v: use a positive duration, or 0 for the default", c.ReconnectWait)
	}
	if err := sinkurl.CheckSource(c.Source); err != nil {
		return nil, err
	}
	broker := &url.URL{Scheme: "tcp", Host: u.Host}
	port := "1883"
	if isTLS(u.Scheme) {
		broker.Scheme, port = "ssl", "8883"
	}
	if u.Port() == "" {
		broker.Host = u.Host + ":" + port
		if strings.Contains(u.Hostname(), ":") {
			broker.Host = "[" + u.Hostname() + "]:" + port
		}
	}
	broker.User = u.User
	return broker, nil
}

// redactURL names a broker for errors and logs: scheme, host and port,
// never the userinfo.
func redactURL(u *url.URL) string { return sinkurl.Redact(u, false) }

// endpoint names the broker of raw for errors and logs, redacted.
func endpoint(raw string) string { return sinkurl.Endpoint(raw, false) }

// String describes c without the password, so a Config can be printed or
// logged.
func (c Config) String() string {
	return fmt.Sprintf("mqttsink.Config{URL: %s, ClientID: %q, Source: %q}", endpoint(c.URL), c.ClientID, c.Source)
}

// GoString is String, so %#v does not print the password either.
func (c Config) GoString() string { return c.String() }

// LogValue logs c without the password.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("url", endpoint(c.URL)),
		slog.String("client_id", c.ClientID),
		slog.String("source", c.Source),
	)
}
