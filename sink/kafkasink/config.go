package kafkasink

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox/internal/sinkurl"
	"github.com/outboxkit/outbox/route"
)

// Defaults; Config.WithDefaults fills zero fields with them.
const (
	// SourceDefault is the CloudEvents source attribute.
	SourceDefault = "/outbox"
	// ClientIDDefault is the client ID brokers see in their logs and
	// quotas.
	ClientIDDefault = "outbox-kafkasink"
	// ConnectTimeoutDefault bounds New's check that a broker answers.
	ConnectTimeoutDefault = 10 * time.Second
	// MaxRecordBytesDefault bounds one record batch, as Kafka's own
	// max.message.bytes default does.
	MaxRecordBytesDefault = 1_000_012
	// CompressionDefault is the codec record batches are compressed with.
	CompressionDefault = "snappy"
	// LingerDefault is how long a partition's records wait for more before
	// the client sends them: franz-go's own default.
	LingerDefault = 10 * time.Millisecond
	// LingerMax is the longest Linger the client accepts.
	LingerMax = time.Minute
	// NoLinger, as Config.Linger, sends records as soon as the client can.
	NoLinger time.Duration = -1
)

// SASL mechanisms Config.SASL accepts.
const (
	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
)

var (
	saslMechanisms = []string{SASLPlain, SASLScramSHA256, SASLScramSHA512}
	compressions   = []string{"none", "gzip", "snappy", "lz4", "zstd"}
)

// Config configures a Sink. ConfigFromURL builds one from a sink URL.
type Config struct {
	// Brokers are the seed brokers, as host:port (the port defaults to
	// 9092). The client discovers the rest of the cluster from them.
	// Required.
	Brokers []string
	// SASL is the mechanism that authenticates User and Password: one of
	// SASLPlain, SASLScramSHA256 and SASLScramSHA512. Required with User.
	SASL     string
	User     string
	Password string
	// TLS, when set, makes every connection use TLS with this
	// configuration (CA pool, client certificate, server name).
	TLS *tls.Config
	// Dial, when set, opens the connections to brokers instead of a plain
	// net.Dialer: through a SOCKS proxy or an SSH tunnel, say. TLS, when
	// set, runs over the connections it returns.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)

	// Router picks each event's topic. Defaults to route.New(""), which
	// routes to {aggregate_type|events}.{event_type}. An event whose topic
	// is not a legal Kafka topic name (empty, longer than 249 bytes, "." or
	// "..", or with characters other than ASCII letters, digits, ".", "_"
	// and "-") fails permanently without failing the rest of its batch.
	Router *route.Router
	// Source is the CloudEvents source attribute, a URI reference naming
	// this outbox. Defaults to SourceDefault.
	Source string

	// AutoCreateTopics lets a produce to a missing topic create it, when
	// the brokers allow auto-creation (auto.create.topics.enable). Without
	// it, an event routed to a missing topic fails permanently.
	AutoCreateTopics bool
	// ClientID names this client to the brokers. Defaults to
	// ClientIDDefault.
	ClientID string
	// ConnectTimeout bounds New's check that a broker answers. Defaults to
	// ConnectTimeoutDefault.
	ConnectTimeout time.Duration
	// MaxRecordBytes bounds one record batch; a larger record fails
	// permanently with MESSAGE_TOO_LARGE. Keep it at or below the topics'
	// max.message.bytes. Defaults to MaxRecordBytesDefault.
	MaxRecordBytes int
	// Compression is the codec of record batches: none, gzip, snappy, lz4
	// or zstd. Defaults to CompressionDefault.
	Compression string
	// Linger is how long a partition's records wait for more records
	// before the client sends them (franz-go's ProducerLinger), at most
	// LingerMax; NoLinger sends them at once. Publish produces a whole
	// batch at once and awaits its acks, so a batch that does not fill a
	// producer batch per partition waits out the linger: it bounds the
	// sink near MaxInFlight × BatchSize per linger, and adds to every
	// event's latency at low traffic. A shorter linger makes more, smaller
	// produce requests, which cost the client and the brokers CPU.
	// Defaults to LingerDefault.
	Linger time.Duration
	// DeliveryTimeout, when set, fails a record the brokers have not
	// acknowledged within this time, retryably. Zero leaves the bound to
	// each Publish call's context (the relay's sink timeout).
	DeliveryTimeout time.Duration
	// Logger receives the client's warnings and errors (lost brokers,
	// failed requests). It never receives credentials. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Router == nil {
		c.Router, _ = route.New("") // the default template always parses
	}
	c.Source = cmp.Or(c.Source, SourceDefault)
	c.ClientID = cmp.Or(c.ClientID, ClientIDDefault)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, ConnectTimeoutDefault)
	c.MaxRecordBytes = cmp.Or(c.MaxRecordBytes, MaxRecordBytesDefault)
	c.Compression = cmp.Or(c.Compression, CompressionDefault)
	c.Linger = cmp.Or(c.Linger, LingerDefault)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// validate checks c, which has its defaults, and returns the seed brokers
// with their ports.
func (c Config) validate() ([]string, error) {
	bad := sinkurl.Errorf
	if len(c.Brokers) == 0 {
		return nil, bad("Brokers", "is empty: name at least one broker, such as 127.0.0.1:9092")
	}
	brokers := make([]string, len(c.Brokers))
	for i, b := range c.Brokers {
		hp, err := sinkurl.HostPort(b, "9092")
		if err != nil {
			return nil, bad("Brokers", "entry %d %s", i, err.Error())
		}
		brokers[i] = hp
	}
	switch {
	case c.User == "" && c.Password != "":
		return nil, bad("User", "is empty but Password is set: set the user name too")
	case c.User != "" && c.SASL == "":
		return nil, bad("SASL", "is empty but User is set: choose the mechanism, one of %s", strings.Join(saslMechanisms, ", "))
	case c.SASL != "" && !slices.Contains(saslMechanisms, c.SASL):
		return nil, bad("SASL", "is %q: use one of %s", c.SASL, strings.Join(saslMechanisms, ", "))
	case c.SASL != "" && c.User == "":
		return nil, bad("User", "is empty but SASL is set: set the user name and password")
	case !sinkurl.ValidSource(c.Source):
		return nil, bad("Source", "%q is not a URI reference: use a value such as /outbox or https://example.com/orders", c.Source)
	case c.ClientID != "" && strings.ContainsFunc(c.ClientID, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return nil, bad("ClientID", "holds control characters: use printable text")
	case c.ConnectTimeout < 0:
		return nil, bad("ConnectTimeout", "is %v: use a positive duration, or 0 for the default %v", c.ConnectTimeout, ConnectTimeoutDefault)
	case c.MaxRecordBytes < 0:
		return nil, bad("MaxRecordBytes", "is %d: use a positive size, or 0 for the default %d", c.MaxRecordBytes, MaxRecordBytesDefault)
	case !slices.Contains(compressions, c.Compression):
		return nil, bad("Compression", "is %q: use one of %s", c.Compression, strings.Join(compressions, ", "))
	case c.Linger != NoLinger && (c.Linger < 0 || c.Linger > LingerMax):
		return nil, bad("Linger", "is %v: use a duration up to %v, NoLinger to send at once, or 0 for the default %v", c.Linger, LingerMax, LingerDefault)
	case c.DeliveryTimeout < 0:
		return nil, bad("DeliveryTimeout", "is %v: use a positive duration, or 0 to leave the bound to Publish's context", c.DeliveryTimeout)
	case c.DeliveryTimeout > 0 && c.DeliveryTimeout < time.Second:
		return nil, bad("DeliveryTimeout", "is %v: the client needs at least 1s", c.DeliveryTimeout)
	}
	return brokers, nil
}

// String describes c with the password redacted, so a Config can be
// printed or logged.
func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kafkasink.Config{Brokers: %v", c.Brokers)
	if c.SASL != "" || c.User != "" {
		fmt.Fprintf(&b, ", SASL: %q, User: %q", c.SASL, c.User)
	}
	if c.Password != "" {
		b.WriteString(", Password: " + sinkurl.Redacted)
	}
	if c.TLS != nil {
		b.WriteString(", TLS: true")
	}
	fmt.Fprintf(&b, ", Source: %q, AutoCreateTopics: %v}", c.Source, c.AutoCreateTopics)
	return b.String()
}

// GoString is String, so %#v does not print the password either.
func (c Config) GoString() string { return c.String() }

// LogValue logs c with the password left out.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Any("brokers", c.Brokers),
		slog.Bool("tls", c.TLS != nil),
		slog.String("sasl", c.SASL),
		slog.String("source", c.Source),
		slog.Bool("auto_create_topics", c.AutoCreateTopics),
		slog.String("compression", c.Compression),
		slog.Duration("linger", c.Linger),
	)
}
