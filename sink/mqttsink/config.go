package mqttsink

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/outbox"
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
	// TLS configures mqtts connections. Defaults to the system roots and
	// the URL's host as server name.
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
	if c.Source == "" {
		c.Source = SourceDefault
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DialTimeoutDefault
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = KeepAliveDefault
	}
	if c.ReconnectWait == 0 {
		c.ReconnectWait = ReconnectWaitDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// sinkParams are the URL query parameters ConfigFromURL moves into Config.
var sinkParams = []string{"client_id", "route", "source", "keepalive", "connect_timeout"}

// ConfigFromURL parses the sink URL form
//
//	mqtt://[user[:pass]@]host[:port][?option=value&…]
//	mqtts://…, ssl://…  (TLS)
//
// into a Config. The options are client_id, route (a topic template),
// source, keepalive and connect_timeout (durations such as 30s).
// They are removed from Config.URL. Errors never quote the password.
func ConfigFromURL(rawURL string) (Config, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return Config{}, err
	}
	bad := func(format string, args ...any) error {
		return &outbox.ConfigError{Field: "URL", Err: fmt.Errorf(format, args...)}
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Config{}, bad("%s: the query does not parse: use option=value pairs joined by &", redactURL(u))
	}
	for name, values := range q {
		if !slices.Contains(sinkParams, name) {
			return Config{}, bad("%s: unknown option %q: use one of %s", redactURL(u), name, strings.Join(sinkParams, ", "))
		}
		if len(values) > 1 {
			return Config{}, bad("%s: option %q is given %d times: give it once", redactURL(u), name, len(values))
		}
	}
	var cfg Config
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{"keepalive", &cfg.KeepAlive}, {"connect_timeout", &cfg.DialTimeout}} {
		if v := q.Get(d.name); v != "" {
			if *d.dst, err = time.ParseDuration(v); err != nil || *d.dst <= 0 {
				return Config{}, bad("%s: %s=%q: use a positive duration such as 30s", redactURL(u), d.name, v)
			}
		}
	}
	cfg.ClientID = q.Get("client_id")
	cfg.Source = q.Get("source")
	if tmpl := q.Get("route"); tmpl != "" {
		if cfg.Router, err = route.New(tmpl); err != nil {
			return Config{}, &outbox.ConfigError{Field: "URL", Err: fmt.Errorf("route option: %w", err)}
		}
	}
	u.RawQuery = ""
	cfg.URL = u.String()
	return cfg, nil
}

// parseURL parses and checks a broker URL. Its errors never quote the
// userinfo.
func parseURL(raw string) (*url.URL, error) {
	bad := func(format string, args ...any) error {
		return &outbox.ConfigError{Field: "URL", Err: fmt.Errorf(format, args...)}
	}
	if raw == "" {
		return nil, bad("is empty: set the broker, such as mqtt://localhost:1883")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the whole URL, password included.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, bad("does not parse (%v): use mqtt://user:pass@host:port, percent-encoding reserved characters in the user and password", err)
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
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, bad("%s has port %q: use 1 to 65535", redactURL(u), p)
		}
	}
	return u, nil
}

// validate checks c, which has its defaults, and returns the broker URL
// for paho (scheme and host only). Its errors never quote the password.
func (c Config) validate() (*url.URL, error) {
	bad := func(field, format string, args ...any) error {
		return &outbox.ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
	}
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
	if _, err := url.Parse(c.Source); err != nil || strings.TrimSpace(c.Source) != c.Source {
		return nil, bad("Source", "%q is not a URI reference: use something like /outbox or urn:example:orders", c.Source)
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
func redactURL(u *url.URL) string {
	host := u.Host
	if host == "" {
		host = "?"
	}
	return u.Scheme + "://" + host
}

// endpoint names the broker of raw for errors and logs, redacted.
func endpoint(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return redactURL(u)
}

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
