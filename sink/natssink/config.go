package natssink

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/sinkurl"
	"github.com/outboxkit/outbox/route"
)

// Defaults; Config.WithDefaults fills zero fields with them.
const (
	// SourceDefault is the CloudEvents source attribute.
	SourceDefault = "/outbox"
	// NameDefault is the connection name the server shows in its monitoring.
	NameDefault = "outbox-natssink"
	// ConnectTimeoutDefault bounds dialing one server.
	ConnectTimeoutDefault = 5 * time.Second
	// AckTimeoutDefault bounds the wait for one message's JetStream ack.
	AckTimeoutDefault = 5 * time.Second
	// ReconnectWaitDefault is the pause between reconnect attempts to a
	// server.
	ReconnectWaitDefault = time.Second
	// MaxPendingDefault is the most messages published and not yet
	// acknowledged at once, across all Publish calls.
	MaxPendingDefault = 4096
	// DuplicateWindowDefault is the duplicate window of a stream the sink
	// creates: JetStream's own default.
	DuplicateWindowDefault = 2 * time.Minute
	// NoStreamRetriesDefault is how often a publish that no stream answered
	// is retried, 250ms apart, before it fails permanently.
	NoStreamRetriesDefault = 2
)

// Config configures a Sink. ConfigFromURL builds one from a sink URL.
type Config struct {
	// Servers are the NATS servers to connect to, as host:port or
	// nats://host:port (tls://host:port for TLS). The client picks one and
	// fails over to the others, and to servers the cluster announces.
	// Credentials go in User, Password, Token or CredsFile, never here.
	// Required.
	Servers []string
	// User and Password authenticate with a user name and password.
	User     string
	Password string
	// Token authenticates with a token. It excludes User and Password.
	Token string
	// CredsFile is a NATS credentials file (a user JWT and its NKey seed),
	// as issued by an operator for NGS or a decentralized-auth server.
	CredsFile string
	// TLS, when set, makes every connection use TLS with this
	// configuration (CA pool, client certificate, server name).
	TLS *tls.Config

	// Router picks each event's subject. Defaults to route.New(""), which
	// routes to {aggregate_type|events}.{event_type}. An event whose subject
	// is not a valid NATS subject to publish to (empty, with whitespace, a
	// wildcard token * or >, an empty token, or starting with $) fails
	// permanently without failing the rest of its batch.
	Router *route.Router
	// Source is the CloudEvents source attribute, a URI reference naming
	// this outbox. Defaults to SourceDefault.
	Source string

	// Stream, when set, is the JetStream stream every message must land
	// in: publishes carry Nats-Expected-Stream, so a message that some
	// other stream captures fails permanently instead of going astray. New
	// checks that the stream exists unless CreateStream is set.
	Stream string
	// CreateStream makes New create Stream when it is missing, storing
	// StreamSubjects on file with DuplicateWindow. An existing stream is
	// left as it is. It needs Stream and StreamSubjects.
	CreateStream bool
	// StreamSubjects are the subjects a created stream stores, such as
	// "order.>" for the default routing of events of aggregate type order.
	StreamSubjects []string
	// DuplicateWindow is how long a created stream remembers message IDs
	// to drop re-published events. Defaults to DuplicateWindowDefault. It
	// must exceed the relay's lease, after which a crashed relay's events
	// are published again.
	DuplicateWindow time.Duration

	// Name is the connection's name, shown by the server's monitoring.
	// Defaults to NameDefault.
	Name string
	// ConnectTimeout bounds dialing one server. Defaults to
	// ConnectTimeoutDefault.
	ConnectTimeout time.Duration
	// AckTimeout bounds the wait for one message's JetStream ack; an
	// unanswered message then fails, retryably. Publish also returns when
	// its context ends. Defaults to AckTimeoutDefault.
	AckTimeout time.Duration
	// ReconnectWait is the pause between reconnect attempts to a server
	// after the connection was lost. The client reconnects forever; while
	// it is disconnected, publishes fail at once, retryably. Defaults to
	// ReconnectWaitDefault.
	ReconnectWait time.Duration
	// MaxPending is the most messages published and not yet acknowledged
	// at once across all Publish calls; a larger batch waits for acks to
	// make room. Defaults to MaxPendingDefault.
	MaxPending int
	// NoStreamRetries is how often a publish that no stream answered ("no
	// responders", as while a stream leader is being elected) is retried,
	// 250ms apart, before it fails permanently. Defaults to
	// NoStreamRetriesDefault; -1 means no retry.
	NoStreamRetries int
	// Logger receives connection events (disconnected, reconnected). It
	// never receives credentials. Defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Router == nil {
		c.Router, _ = route.New("") // the default template always parses
	}
	c.Source = cmp.Or(c.Source, SourceDefault)
	c.Name = cmp.Or(c.Name, NameDefault)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, ConnectTimeoutDefault)
	c.AckTimeout = cmp.Or(c.AckTimeout, AckTimeoutDefault)
	c.ReconnectWait = cmp.Or(c.ReconnectWait, ReconnectWaitDefault)
	c.MaxPending = cmp.Or(c.MaxPending, MaxPendingDefault)
	c.DuplicateWindow = cmp.Or(c.DuplicateWindow, DuplicateWindowDefault)
	c.NoStreamRetries = cmp.Or(c.NoStreamRetries, NoStreamRetriesDefault)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// validate checks c, which has its defaults, and returns the server URLs
// to dial.
func (c Config) validate() ([]string, error) {
	bad := sinkurl.Errorf
	if len(c.Servers) == 0 {
		return nil, bad("Servers", "is empty: name at least one server, such as 127.0.0.1:4222")
	}
	servers := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		u, err := serverURL(s)
		if err != nil {
			return nil, &outbox.ConfigError{Field: "Servers", Err: fmt.Errorf("entry %d: %w", i, err)}
		}
		servers[i] = u
	}
	switch {
	case c.Token != "" && (c.User != "" || c.Password != ""):
		return nil, bad("Token", "is set together with User or Password: use either a token or a user name and password")
	case c.Password != "" && c.User == "":
		return nil, bad("User", "is empty but Password is set: set the user name too")
	case c.CredsFile != "" && (c.Token != "" || c.User != ""):
		return nil, bad("CredsFile", "is set together with a token or user name: use one way to authenticate")
	case !sinkurl.ValidSource(c.Source):
		return nil, bad("Source", "%q is not a URI reference: use a value such as /outbox or https://example.com/orders", c.Source)
	case c.CreateStream && c.Stream == "":
		return nil, bad("Stream", "is empty but CreateStream is set: name the stream to create, such as OUTBOX")
	case c.CreateStream && len(c.StreamSubjects) == 0:
		return nil, bad("StreamSubjects", "is empty but CreateStream is set: list the subjects the stream stores, such as order.>")
	case c.Stream != "" && !validStreamName(c.Stream):
		return nil, bad("Stream", "%q is not a valid stream name: use letters, digits, - and _ only", c.Stream)
	case c.ConnectTimeout < 0:
		return nil, bad("ConnectTimeout", "is %v: use a positive duration, or 0 for the default %v", c.ConnectTimeout, ConnectTimeoutDefault)
	case c.AckTimeout < 0:
		return nil, bad("AckTimeout", "is %v: use a positive duration, or 0 for the default %v", c.AckTimeout, AckTimeoutDefault)
	case c.ReconnectWait < 0:
		return nil, bad("ReconnectWait", "is %v: use a positive duration, or 0 for the default %v", c.ReconnectWait, ReconnectWaitDefault)
	case c.MaxPending < 0:
		return nil, bad("MaxPending", "is %d: use at least 1, or 0 for the default %d", c.MaxPending, MaxPendingDefault)
	case c.DuplicateWindow < 0:
		return nil, bad("DuplicateWindow", "is %v: use a positive duration, or 0 for the default %v", c.DuplicateWindow, DuplicateWindowDefault)
	case c.NoStreamRetries < -1:
		return nil, bad("NoStreamRetries", "is %d: use -1 for no retry, 0 for the default %d, or a positive count", c.NoStreamRetries, NoStreamRetriesDefault)
	}
	for i, s := range c.StreamSubjects {
		if err := checkStreamSubject(s); err != nil {
			return nil, &outbox.ConfigError{Field: "StreamSubjects", Err: fmt.Errorf("entry %d: %w", i, err)}
		}
	}
	return servers, nil
}

// serverURL turns host:port or a nats:// or tls:// URL without credentials
// into the URL the client dials.
func serverURL(s string) (string, error) {
	if s == "" {
		return "", errors.New("is empty: use host:port")
	}
	raw := s
	if !strings.Contains(s, "://") {
		raw = "nats://" + s
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%q is not host:port or a nats:// URL", redactServer(s))
	}
	switch {
	case u.Scheme != "nats" && u.Scheme != "tls":
		return "", fmt.Errorf("%q has scheme %q: use host:port, nats://host:port or tls://host:port", redactServer(s), u.Scheme)
	case u.User != nil:
		return "", errors.New("holds credentials: put them in User and Password, Token or CredsFile")
	case u.Hostname() == "":
		return "", fmt.Errorf("%q has no host: use host:port", s)
	case u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("%q has a path, query or fragment: use host:port", s)
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "4222")
	}
	return u.Scheme + "://" + u.Host, nil
}

// redactServer drops userinfo from a server entry for an error message.
func redactServer(s string) string {
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		scheme := ""
		if i := strings.Index(s, "://"); i >= 0 && i < at {
			scheme = s[:i+3]
		}
		return scheme + sinkurl.Redacted + "@" + s[at+1:]
	}
	return s
}

// validStreamName reports whether s can name a JetStream stream: no
// whitespace, dots, wildcards or path separators.
func validStreamName(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(".*>/\\", c) >= 0 {
			return false
		}
	}
	return true
}

// String describes c with credentials redacted, so a Config can be printed
// or logged.
func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "natssink.Config{Servers: %v", c.Servers)
	if c.User != "" {
		fmt.Fprintf(&b, ", User: %q", c.User)
	}
	if c.Password != "" {
		b.WriteString(", Password: " + sinkurl.Redacted)
	}
	if c.Token != "" {
		b.WriteString(", Token: " + sinkurl.Redacted)
	}
	if c.CredsFile != "" {
		fmt.Fprintf(&b, ", CredsFile: %q", c.CredsFile)
	}
	if c.TLS != nil {
		b.WriteString(", TLS: true")
	}
	if c.Stream != "" {
		fmt.Fprintf(&b, ", Stream: %q, CreateStream: %v", c.Stream, c.CreateStream)
	}
	fmt.Fprintf(&b, ", Source: %q}", c.Source)
	return b.String()
}

// GoString is String, so %#v does not print credentials either.
func (c Config) GoString() string { return c.String() }

// LogValue logs c with credentials left out.
func (c Config) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.Any("servers", c.Servers),
		slog.Bool("tls", c.TLS != nil),
		slog.Bool("auth", c.User != "" || c.Token != "" || c.CredsFile != ""),
		slog.String("source", c.Source),
	}
	if c.Stream != "" {
		attrs = append(attrs, slog.String("stream", c.Stream), slog.Bool("create_stream", c.CreateStream))
	}
	return slog.GroupValue(attrs...)
}
