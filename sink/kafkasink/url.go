package kafkasink

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/route"
)

// Scheme is the sink URL scheme this package serves.
const Scheme = "kafka"

// Options are the query parameters a sink URL may carry; see the package
// documentation for what each does.
var Options = []string{
	"tls", "tls_ca", "tls_cert", "tls_key", "tls_server_name", "sasl",
	"route", "source", "client_id", "auto_create_topics", "max_record_bytes", "compression",
	"connect_timeout", "delivery_timeout",
}

// ConfigFromURL parses a sink URL of the form
//
//	kafka://[user:pass@]host[:port][,host[:port]…][?option=value&…]
//
// into a Config (see the package documentation for the options). Files the
// TLS options name are read now. Errors are *outbox.ConfigError values that
// never quote the password.
func ConfigFromURL(rawURL string) (Config, error) {
	var cfg Config
	p, err := splitURL(rawURL)
	if err != nil {
		return cfg, &outbox.ConfigError{Field: "URL", Err: err}
	}
	cfg.Brokers = p.hosts
	if p.hasUser {
		if !p.hasPassword {
			return Config{}, &outbox.ConfigError{Field: "URL", Err: errors.New("has a user name without a password: write user:password@")}
		}
		cfg.User, cfg.Password = p.user, p.password
	}
	o := options{q: p.query}
	cfg.TLS, err = tlsFromOptions(&o)
	if err != nil {
		return Config{}, err
	}
	cfg.SASL = strings.ToLower(o.str("sasl"))
	switch {
	case cfg.SASL != "" && !slices.Contains(saslMechanisms, cfg.SASL):
		return Config{}, optionError("sasl", fmt.Errorf("is %q: use one of %s", cfg.SASL, strings.Join(saslMechanisms, ", ")))
	case cfg.User != "" && cfg.SASL == "":
		return Config{}, optionError("sasl", fmt.Errorf("is missing: credentials in the URL need ?sasl= with one of %s", strings.Join(saslMechanisms, ", ")))
	case cfg.SASL != "" && cfg.User == "":
		return Config{}, optionError("sasl", errors.New("is set but the URL has no user:password@"))
	}
	if v := o.str("route"); v != "" {
		r, err := route.New(v)
		if err != nil {
			return Config{}, optionError("route", err)
		}
		cfg.Router = r
	}
	cfg.Source = o.str("source")
	cfg.ClientID = o.str("client_id")
	cfg.AutoCreateTopics = o.boolean("auto_create_topics")
	cfg.MaxRecordBytes = o.integer("max_record_bytes")
	cfg.Compression = strings.ToLower(o.str("compression"))
	if cfg.Compression != "" && !slices.Contains(compressions, cfg.Compression) {
		o.fail("compression", fmt.Errorf("is %q: use one of %s", cfg.Compression, strings.Join(compressions, ", ")))
	}
	cfg.ConnectTimeout = o.duration("connect_timeout")
	cfg.DeliveryTimeout = o.duration("delivery_timeout")
	if o.err != nil {
		return Config{}, o.err
	}
	return cfg, nil
}

// parsedURL is a sink URL taken apart.
type parsedURL struct {
	user, password       string
	hasUser, hasPassword bool
	hosts                []string // host:port, port defaulted
	query                url.Values
}

// splitURL takes a kafka:// URL apart by hand: net/url refuses the comma
// separated host list. Errors never quote the userinfo.
func splitURL(raw string) (parsedURL, error) {
	var p parsedURL
	i := strings.Index(raw, "://")
	if i < 0 {
		return p, errors.New("is not a URL: use kafka://host:port")
	}
	if scheme := raw[:i]; !strings.EqualFold(scheme, Scheme) {
		return p, fmt.Errorf("has scheme %q: use kafka://host:port", scheme)
	}
	rest := raw[i+3:]
	if strings.ContainsRune(rest, '#') {
		return p, errors.New("has a #fragment: remove it")
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	authority, path, _ := strings.Cut(rest, "/")
	if path != "" {
		return p, errors.New("has a path: Kafka URLs name brokers only; put options in the query string")
	}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo := authority[:at]
		authority = authority[at+1:]
		user, password, hasPassword := strings.Cut(userinfo, ":")
		var err error
		if p.user, err = url.PathUnescape(user); err != nil {
			return p, errors.New("has a badly percent-encoded user name")
		}
		if p.password, err = url.PathUnescape(password); err != nil {
			return p, errors.New("has a badly percent-encoded password")
		}
		p.hasUser, p.hasPassword = p.user != "", hasPassword
		if !p.hasUser {
			return p, errors.New("has credentials without a user name before the @")
		}
	}
	if authority == "" {
		return p, errors.New("has no host: use kafka://host:port")
	}
	for _, h := range strings.Split(authority, ",") {
		hp, err := hostPort(h, "9092")
		if err != nil {
			return p, err
		}
		p.hosts = append(p.hosts, hp)
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return p, errors.New("has a query string that does not parse: use ?option=value&option=value with values percent-encoded")
	}
	for name, values := range q {
		if !slices.Contains(Options, name) {
			return p, fmt.Errorf("has unknown option %q: use one of %s", name, strings.Join(Options, ", "))
		}
		if len(values) > 1 {
			return p, fmt.Errorf("has option %q %d times: give it once", name, len(values))
		}
	}
	p.query = q
	return p, nil
}

// hostPort checks host[:port] and adds the default port.
func hostPort(h, defaultPort string) (string, error) {
	if h == "" {
		return "", errors.New("has an empty entry in its host list: separate hosts with single commas")
	}
	host, port := h, defaultPort
	switch {
	case strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]"):
		host = h[1 : len(h)-1] // [::1] without a port
	case strings.HasPrefix(h, "[") || strings.Count(h, ":") == 1:
		var err error
		if host, port, err = net.SplitHostPort(h); err != nil {
			return "", fmt.Errorf("has host %q that is not host:port", h)
		}
	case strings.Contains(h, ":"):
		return "", fmt.Errorf("has host %q: write an IPv6 address in brackets, such as [::1]:%s", h, defaultPort)
	}
	n, err := strconv.Atoi(port)
	switch {
	case host == "":
		return "", fmt.Errorf("has host %q without a host name", h)
	case strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r >= 0x7f || strings.ContainsRune("/\\[]@%,?#", r) }):
		return "", fmt.Errorf("has host %q that is not a host name or address", h)
	case err != nil || n < 1 || n > 65535:
		return "", fmt.Errorf("has host %q whose port is not a number from 1 to 65535", h)
	}
	return net.JoinHostPort(host, port), nil
}

// options reads query options, keeping the first error.
type options struct {
	q   url.Values
	err error
}

func optionError(name string, err error) error {
	return &outbox.ConfigError{Field: "URL option " + name, Err: err}
}

func (o *options) fail(name string, err error) {
	if o.err == nil {
		o.err = optionError(name, err)
	}
}

func (o *options) has(name string) bool { return o.q.Has(name) }

func (o *options) str(name string) string { return o.q.Get(name) }

func (o *options) boolean(name string) bool {
	v := o.q.Get(name)
	if v == "" {
		return o.q.Has(name) // ?create_stream alone means true
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		o.fail(name, fmt.Errorf("is %q: use true or false", v))
	}
	return b
}

func (o *options) duration(name string) time.Duration {
	v := o.q.Get(name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		o.fail(name, fmt.Errorf("is %q: use a positive duration such as 500ms or 5s", v))
	}
	return d
}

func (o *options) integer(name string) int {
	v := o.q.Get(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		o.fail(name, fmt.Errorf("is %q: use a positive whole number", v))
	}
	return n
}

// tlsFromOptions builds the TLS configuration the tls options ask for, or
// nil when there are none.
func tlsFromOptions(o *options) (*tls.Config, error) {
	on := o.boolean("tls")
	if o.err != nil {
		return nil, o.err
	}
	ca, cert, key, serverName := o.str("tls_ca"), o.str("tls_cert"), o.str("tls_key"), o.str("tls_server_name")
	if o.has("tls") && !on {
		if ca != "" || cert != "" || key != "" || serverName != "" {
			return nil, optionError("tls", errors.New("is false but other tls_ options are set: drop tls=false"))
		}
		return nil, nil
	}
	if !on && ca == "" && cert == "" && key == "" && serverName == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, optionError("tls_ca", fmt.Errorf("cannot read the CA file: %w", err))
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, optionError("tls_ca", fmt.Errorf("%s holds no PEM certificate: point it at the CA's certificate", ca))
		}
	}
	if (cert == "") != (key == "") {
		return nil, optionError("tls_cert", errors.New("and tls_key go together: set both for a client certificate, or neither"))
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, optionError("tls_cert", fmt.Errorf("cannot load the client certificate and key: %w", err))
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}
