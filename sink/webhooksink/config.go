package webhooksink

import (
	"cmp"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/envelope"
	"github.com/outboxkit/outbox/internal/sinkurl"
)

// Defaults; Config.WithDefaults fills zero fields with them.
const (
	SourceDefault      = "/outbox"
	TimeoutDefault     = 10 * time.Second
	ConcurrencyDefault = 16
	UserAgentDefault   = "outbox-webhooksink"
	// BatchMax bounds Config.Batch.
	BatchMax = 10000
)

// Config configures a Sink.
type Config struct {
	// URL is the endpoint every event is POSTed to: an absolute http or
	// https URL. Userinfo in it is sent as Basic authentication. Redirects
	// are not followed, so use the final URL. Required.
	URL string
	// Secret, when set, signs every request with Standard Webhooks
	// headers. A whsec_<base64> secret is base64-decoded; any other string
	// is the HMAC key as is (see the package documentation).
	Secret string
	// Source is the CloudEvents source attribute, a URI reference naming
	// this outbox. Defaults to SourceDefault.
	Source string
	// Timeout bounds each request, from sending to reading the answer.
	// Defaults to TimeoutDefault. Keep it below the relay's SinkTimeout,
	// which bounds the whole batch.
	Timeout time.Duration
	// Concurrency is the most requests in flight at once, across all
	// concurrent Publish calls. Defaults to ConcurrencyDefault.
	Concurrency int
	// Batch, when above 1, sends events up to Batch to a request as a
	// CloudEvents JSON batch (Content-Type
	// application/cloudevents-batch+json): a JSON array of events in
	// structured mode, each with its attributes and the payload as data.
	// For endpoints that accept it; a 2xx answer acknowledges every event
	// of the request. Defaults to 1: one event per request in binary mode.
	Batch int
	// Client sends the requests. Its CheckRedirect is replaced (on a copy)
	// so redirects are never followed. Defaults to a client with its own
	// transport that opens at most Concurrency connections to the endpoint
	// and keeps them alive between batches, and speaks HTTP/2 where an
	// https endpoint offers it (with TLS and DenyPrivateNetworks too). A
	// Client of your own needs ForceAttemptHTTP2 in its transport for
	// HTTP/2 when it sets a TLS configuration or a dialer.
	Client *http.Client
	// TLS configures the default client's https connections: a private CA
	// in RootCAs, a client certificate in Certificates. Defaults to the
	// system roots and no client certificate. It takes an https:// URL and
	// no Client: configure a Client's own transport instead.
	TLS *tls.Config
	// Headers are extra request headers, such as Authorization. Their
	// values are treated as secrets. They may not set headers this sink
	// owns: Content-Type, Content-Length, Host, User-Agent, traceparent,
	// tracestate, ce-* or webhook-*.
	Headers map[string]string
	// UserAgent is the User-Agent header. Defaults to UserAgentDefault.
	UserAgent string
	// DenyPrivateNetworks refuses to connect to private (RFC 1918, IPv6
	// unique local), loopback, link-local, carrier-grade NAT, multicast
	// and cloud metadata (169.254.169.254, fd00:ec2::254) addresses, for
	// platforms where webhook URLs come from tenants. The address is
	// checked when each connection is dialed, after the name is resolved,
	// so a name that resolves elsewhere at dial time (DNS rebinding) is
	// caught too; redirects are never followed. A refused connection is a
	// permanent error: the event is dead-lettered with the reason. The
	// default client then ignores HTTP_PROXY and HTTPS_PROXY (a proxy
	// would connect on the sink's behalf, past the check). It takes no
	// Client: guard your Client's dialer yourself instead.
	DenyPrivateNetworks bool
	// AllowNetworks are networks reached even with DenyPrivateNetworks,
	// such as an internal receiver's 10.1.2.0/24.
	AllowNetworks []netip.Prefix
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Source = cmp.Or(c.Source, SourceDefault)
	c.Timeout = cmp.Or(c.Timeout, TimeoutDefault)
	c.Concurrency = cmp.Or(c.Concurrency, ConcurrencyDefault)
	c.UserAgent = cmp.Or(c.UserAgent, UserAgentDefault)
	return c
}

// validate checks c, which has its defaults, and returns the parsed URL
// and the signer (nil without a secret). Its errors never quote the URL's
// userinfo, the secret or header values.
func (c Config) validate() (*url.URL, *standardwebhooks.Webhook, error) {
	bad := sinkurl.Errorf
	if c.URL == "" {
		return nil, nil, bad("URL", "is empty: set the endpoint to POST events to, such as https://hooks.example.com/outbox")
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		// url.Parse quotes the whole URL, password included; keep only
		// the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, nil, bad("URL", "does not parse (%v): use an absolute http:// or https:// URL", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, nil, bad("URL", "%s has scheme %q: use an absolute http:// or https:// URL", redactURL(u), u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return nil, nil, bad("URL", "%s has no host: use an absolute URL such as https://hooks.example.com/outbox", redactURL(u))
	case u.Fragment != "":
		return nil, nil, bad("URL", "%s has a #fragment, which is never sent: remove it", redactURL(u))
	case c.TLS != nil && c.Client != nil:
		return nil, nil, bad("TLS", "is set along with Client: configure TLS in the Client's transport, or drop Client")
	case c.DenyPrivateNetworks && c.Client != nil:
		return nil, nil, bad("DenyPrivateNetworks", "is set along with Client: guard the Client's own dialer, or drop Client")
	case len(c.AllowNetworks) > 0 && !c.DenyPrivateNetworks:
		return nil, nil, bad("AllowNetworks", "is set without DenyPrivateNetworks, which it makes exceptions to: set both, or drop AllowNetworks")
	case c.TLS != nil && u.Scheme != "https":
		return nil, nil, bad("TLS", "is set but %s is plain HTTP: use an https:// URL, or drop TLS", redactURL(u))
	}
	if err := sinkurl.CheckSource(c.Source); err != nil {
		return nil, nil, err
	}
	if c.Timeout < 0 {
		return nil, nil, bad("Timeout", "is %v: use a positive duration, or 0 for the default %v", c.Timeout, TimeoutDefault)
	}
	if c.Concurrency < 0 {
		return nil, nil, bad("Concurrency", "is %d: use at least 1, or 0 for the default %d", c.Concurrency, ConcurrencyDefault)
	}
	if c.Batch < 0 || c.Batch > BatchMax {
		return nil, nil, bad("Batch", "is %d: use 1 to %d events per request, or 0 for one event per request in binary mode", c.Batch, BatchMax)
	}
	if !envelope.ValidHeaderValue(c.UserAgent) {
		return nil, nil, bad("UserAgent", "%q holds control characters: use printable text", c.UserAgent)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Headers)) {
		if err := checkStaticHeader(name, c.Headers[name]); err != nil {
			return nil, nil, &outbox.ConfigError{Field: "Headers", Err: err}
		}
	}
	signer, err := newSigner(c.Secret)
	if err != nil {
		return nil, nil, &outbox.ConfigError{Field: "Secret", Err: err}
	}
	return u, signer, nil
}

const secretPrefix = "whsec_"

// newSigner returns the Standard Webhooks signer for secret, or nil for no
// secret. Its errors never quote the secret.
func newSigner(secret string) (*standardwebhooks.Webhook, error) {
	switch {
	case secret == "":
		return nil, nil
	case secret == secretPrefix:
		return nil, errors.New("is whsec_ with no key after it: paste the whole secret")
	case strings.HasPrefix(secret, secretPrefix):
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			// The library's error names the offending byte offset only,
			// but keep our own words in case that ever changes.
			return nil, errors.New("starts with whsec_ but the rest is not valid standard base64: " +
				"paste the secret exactly as generated, or drop the whsec_ prefix to use the string itself as the key")
		}
		return wh, nil
	default:
		return standardwebhooks.NewWebhookRaw([]byte(secret))
	}
}

// ownedHeaders are request headers the sink sets itself.
var ownedHeaders = []string{"Content-Type", "Content-Length", "Host", "User-Agent", "Traceparent", "Tracestate", "Transfer-Encoding"}

func checkStaticHeader(name, value string) error {
	canon := http.CanonicalHeaderKey(name)
	lower := strings.ToLower(name)
	switch {
	case !validHeaderName(name):
		return fmt.Errorf("name %q is not a valid HTTP header name: use letters, digits and - only", name)
	case slices.Contains(ownedHeaders, canon) || strings.HasPrefix(lower, "ce-") || strings.HasPrefix(lower, "webhook-"):
		return fmt.Errorf("%s is set by the sink and cannot be overridden: remove it (use Config.UserAgent for User-Agent, Config.Secret for signatures)", canon)
	case !envelope.ValidHeaderValue(value):
		// Never quote the value: it is likely a credential.
		return fmt.Errorf("the value of %s holds control characters such as a newline: trim it", canon)
	}
	return nil
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// redactURL names an endpoint for errors and logs: scheme and host, and
// "/…" when the URL has more. Webhook URLs often carry tokens in the
// userinfo, path or query string.
func redactURL(u *url.URL) string {
	s := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Opaque != "" {
		s += "/…"
	}
	return s
}

// urlFingerprint tells endpoints on one host apart in logs without showing
// their path or query string: the first 8 hex digits of the SHA-256 of
// everything after the host, or "" when there is nothing after it.
func urlFingerprint(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || redactURL(u) == u.Scheme+"://"+u.Host {
		return ""
	}
	sum := sha256.Sum256([]byte(u.EscapedPath() + "?" + u.RawQuery + u.Opaque))
	return hex.EncodeToString(sum[:4])
}

// redactRawURL is redactURL for a string that may not parse.
func redactRawURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return redactURL(u)
}

// String describes c with the secret, header values and URL path redacted,
// so a Config can be printed or logged.
func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "webhooksink.Config{URL: %s", redactRawURL(c.URL))
	if c.Secret != "" {
		b.WriteString(", Secret: " + sinkurl.Redacted)
	}
	fmt.Fprintf(&b, ", Source: %q, Timeout: %v, Concurrency: %d", c.Source, c.Timeout, c.Concurrency)
	if c.TLS != nil {
		fmt.Fprintf(&b, ", TLS: {private CA: %t, client certificate: %t}", c.TLS.RootCAs != nil, len(c.TLS.Certificates) > 0)
	}
	if len(c.Headers) > 0 {
		b.WriteString(", Headers: {")
		for i, k := range slices.Sorted(maps.Keys(c.Headers)) {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(k + ": " + sinkurl.Redacted)
		}
		b.WriteString("}")
	}
	if c.UserAgent != "" {
		fmt.Fprintf(&b, ", UserAgent: %q", c.UserAgent)
	}
	if c.DenyPrivateNetworks {
		fmt.Fprintf(&b, ", DenyPrivateNetworks: true, AllowNetworks: %v", c.AllowNetworks)
	}
	b.WriteString("}")
	return b.String()
}

// GoString is String, so %#v does not print the secret either.
func (c Config) GoString() string { return c.String() }

// LogValue logs c with the secret, header values and URL path redacted.
func (c Config) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("url", redactRawURL(c.URL)),
	}
	if fp := urlFingerprint(c.URL); fp != "" {
		// Two relays posting to one host under different paths log apart.
		attrs = append(attrs, slog.String("url_path_sha256", fp))
	}
	attrs = append(attrs,
		slog.Bool("signed", c.Secret != ""),
		slog.String("source", c.Source),
		slog.Duration("timeout", c.Timeout),
		slog.Int("concurrency", c.Concurrency),
	)
	if c.Batch > 1 {
		attrs = append(attrs, slog.Int("batch", c.Batch))
	}
	if c.TLS != nil {
		attrs = append(attrs, slog.Bool("tls_private_ca", c.TLS.RootCAs != nil), slog.Bool("tls_client_certificate", len(c.TLS.Certificates) > 0))
	}
	if len(c.Headers) > 0 {
		attrs = append(attrs, slog.Any("headers", slices.Sorted(maps.Keys(c.Headers))))
	}
	if c.DenyPrivateNetworks {
		attrs = append(attrs, slog.Bool("deny_private_networks", true), slog.Any("allow_networks", c.AllowNetworks))
	}
	return slog.GroupValue(attrs...)
}
