package natssink

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
const Scheme = "nats"

// Options are the query parameters a sink URL may carry; see the package
// documentation for what each does.
var Options = []string{
	"tls", "tls_ca", "tls_cert", "tls_key", "tls_server_name",
	"creds", "stream", "create_stream", "stream_subjects", "duplicate_window",
	"route", "source", "name", "connect_timeout", "ack_timeout", "reconnect_wait", "max_pending",
}

// ConfigFromURL parses a sink URL of the form
//
//	nats://[user:pass@ | token@]host[:port][,host[:port]…][?option=value&…]
//
// into a Config (see the package documentation for the options). Files the
// options name (CA, client certificate, credentials) are read or checked
// now. Errors are *outbox.ConfigError values that never quote the password
// or token.
func ConfigFromURL(rawURL string) (Config, error) {
	var cfg Config
	p, err := splitURL(rawURL)
	if err != nil {
		return cfg, &outbox.ConfigError{Field: "URL", Err: err}
	}
	for _, h := range p.hosts {
		cfg.Servers = append(cfg.Servers, "nats://"+h)
	}
	if p.hasUser {
		if p.hasPassword {
			cfg.User, cfg.Password = p.user, p.password
		} else {
			cfg.Token = p.user // nats://TOKEN@host, as nats-server documents
		}
	}
	o := options{q: p.query}
	cfg.TLS, err = tlsFromOptions(&o)
	if err != nil {
		return Config{}, err
	}
	cfg.CredsFile = o.str("creds")
	if cfg.CredsFile != "" {
		if _, err := os.Stat(cfg.CredsFile); err != nil {
			return Config{}, optionError("creds", fmt.Errorf("cannot read the credentials file: %w", err))
		}
	}
	cfg.Stream = o.str("stream")
	cfg.CreateStream = o.boolean("create_stream")
	if v := o.str("stream_subjects"); v != "" {
		cfg.StreamSubjects = strings.Split(v, ",")
	}
	cfg.DuplicateWindow = o.duration("duplicate_window")
	if v := o.str("route"); v != "" {
		r, err := route.New(v)
		if err != nil {
			return Config{}, optionError("route", err)
		}
		cfg.Router = r
	}
	cfg.Source = o.str("source")
	cfg.Name = o.str("name")
	cfg.ConnectTimeout = o.duration("connect_timeout")
	cfg.AckTimeout = o.duration("ack_timeout")
	cfg.ReconnectWait = o.duration("reconnect_wait")
	cfg.MaxPending = o.integer("max_pending")
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

// splitURL takes a nats:// URL apart by hand: net/url refuses the comma
// separated host list. Errors never quote the userinfo.
func splitURL(raw string) (parsedURL, error) {
	var p parsedURL
	i := strings.Index(raw, "://")
	if i < 0 {
		return p, errors.New("is not a URL: use nats://host:port")
	}
	if scheme := raw[:i]; !strings.EqualFold(scheme, Scheme) {
		return p, fmt.Errorf("has scheme %q: use nats://host:port", scheme)
	}
	rest := raw[i+3:]
	if strings.ContainsRune(rest, '#') {
		return p, errors.New("has a #fragment: remove it")
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	authority, path, _ := strings.Cut(rest, "/")
	if path != "" {
		return p, errors.New("has a path: NATS URLs name servers only; put options in the query string")
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
			return p, errors.New("has credentials without a user name or token before the @")
		}
	}
	if authority == "" {
		return p, errors.New("has no host: use nats://host:port")
	}
	for _, h := range strings.Split(authority, ",") {
		hp, err := hostPort(h, "4222")
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
