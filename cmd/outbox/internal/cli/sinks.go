package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/egress"
	"github.com/outboxkit/outbox/internal/sinkurl"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/amqpsink"
	"github.com/outboxkit/outbox/sink/kafkasink"
	"github.com/outboxkit/outbox/sink/mqttsink"
	"github.com/outboxkit/outbox/sink/natssink"
	"github.com/outboxkit/outbox/sink/redissink"
	"github.com/outboxkit/outbox/sink/stdoutsink"
	"github.com/outboxkit/outbox/sink/webhooksink"
)

// sinkOption is a relay setting that only some sinks take.
type sinkOption string

const (
	optSource     sinkOption = "source"      // --source: the CloudEvents source attribute
	optRoute      sinkOption = "route"       // --route, --route-rule: the destination of each event
	optWebhook    sinkOption = "webhook"     // --webhook-secret, --sink-concurrency, --webhook-batch, --webhook-deny-private, --webhook-allow-network
	optWebhookTLS sinkOption = "webhook-tls" // --webhook-ca, --webhook-cert, --webhook-key
)

// sinkOptions are the relay settings and flags a sink may use.
type sinkOptions struct {
	Timeout       time.Duration // the relay's sink timeout: bound on one publish
	WebhookSecret string
	Concurrency   int
	WebhookBatch  int           // events per request (webhooksink.Config.Batch); 0 or 1 for one
	Source        string        // empty: the URL's source option, else the sink's default
	Router        *route.Router // nil: the URL's route option, else route.Default
	Stdout        io.Writer
	Logger        *slog.Logger
	// WebhookCA, WebhookCert and WebhookKey are PEM files: a private CA
	// to trust and a client certificate with its key, for https webhooks.
	WebhookCA, WebhookCert, WebhookKey string
	// WebhookDenyPrivate and WebhookAllowNetworks are the webhook's
	// egress guard (webhooksink.Config.DenyPrivateNetworks and
	// AllowNetworks); the networks are CIDRs or single addresses.
	WebhookDenyPrivate   bool
	WebhookAllowNetworks []string
	// given names how the operator set each sinkOption (a flag, or a
	// config file key and line), so that a sink that does not take it is
	// refused instead of ignoring it.
	given map[sinkOption]string
	// name says how the operator set a flag, for errors about its value:
	// the flag, or a config file key and line. Nil means the flag.
	name func(flag string) string
}

// flagName is o.name(flag), or the flag itself.
func (o sinkOptions) flagName(flag string) string {
	if o.name == nil {
		return "--" + flag
	}
	return o.name(flag)
}

// sinkScheme opens the sink for one --sink URL scheme.
type sinkScheme struct {
	name  string
	takes []sinkOption
	// tokenUser: a user name without a password is a secret token
	// (nats://TOKEN@host).
	tokenUser bool
	open      func(ctx context.Context, raw string, o sinkOptions) (outbox.Sink, error)
}

var (
	brokerOptions  = []sinkOption{optSource, optRoute}
	webhookOptions = []sinkOption{optSource, optWebhook}
	// A broker sink takes its CA and client certificate in the URL.
	httpsOptions = []sinkOption{optSource, optWebhook, optWebhookTLS}
)

// sinkSchemes is every --sink URL scheme, in the order the help lists them.
// A new sink adds one entry here. mqttsink also reads tcp://, ssl:// and
// tls:// URLs; the CLI leaves them out because they do not say which
// protocol they mean (NATS uses tls:// too).
var sinkSchemes = []sinkScheme{
	{name: "stdout", open: openStdoutSink},
	{name: "http", takes: webhookOptions, open: openWebhookSink},
	{name: "https", takes: httpsOptions, open: openWebhookSink},
	{name: natssink.Scheme, takes: brokerOptions, tokenUser: true, open: brokerSink(natssink.ConfigFromURL,
		func(c *natssink.Config) commonFields { return commonFields{&c.Router, &c.Source, &c.Logger} }, natssink.New)},
	{name: kafkasink.Scheme, takes: brokerOptions, open: brokerSink(kafkasink.ConfigFromURL,
		func(c *kafkasink.Config) commonFields { return commonFields{&c.Router, &c.Source, &c.Logger} }, kafkasink.New)},
	{name: "amqp", takes: brokerOptions, open: openAMQPSink},
	{name: "amqps", takes: brokerOptions, open: openAMQPSink},
	{name: "redis", takes: brokerOptions, open: openRedisSink},
	{name: "rediss", takes: brokerOptions, open: openRedisSink},
	{name: "mqtt", takes: brokerOptions, open: openMQTTSink},
	{name: "mqtts", takes: brokerOptions, open: openMQTTSink},
}

var (
	openAMQPSink = brokerSink(amqpsink.ConfigFromURL,
		func(c *amqpsink.Config) commonFields { return commonFields{&c.Router, &c.Source, &c.Logger} }, amqpsink.New)
	openRedis = brokerSink(redissink.ConfigFromURL,
		func(c *redissink.Config) commonFields { return commonFields{&c.Router, &c.Source, &c.Logger} }, redissink.New)
	openMQTTSink = brokerSink(mqttsink.ConfigFromURL,
		func(c *mqttsink.Config) commonFields { return commonFields{&c.Router, &c.Source, &c.Logger} }, mqttsink.New)
)

// openRedisSink sends go-redis's own logs, which it otherwise prints to
// stderr past the redactor, to the relay's logger at debug level: they
// repeat, per dial attempt, what the sink reports as errors.
func openRedisSink(ctx context.Context, raw string, o sinkOptions) (outbox.Sink, error) {
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	redis.SetLogger(redisLogger{logger})
	return openRedis(ctx, raw, o)
}

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client", "component", "redissink", "client", "go-redis", "message", fmt.Sprintf(format, v...))
}

// schemeSyntax is what RFC 3986 allows as a URL scheme.
var schemeSyntax = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// sinkSchemeOf returns the scheme of a --sink value: what precedes the
// first colon, or the whole value when it has none ("stdout").
func sinkSchemeOf(raw string) string {
	scheme, _, _ := strings.Cut(raw, ":")
	return strings.ToLower(scheme)
}

// schemeNames lists every --sink scheme.
func schemeNames() string {
	names := make([]string, len(sinkSchemes))
	for i, s := range sinkSchemes {
		names[i] = s.name
	}
	return strings.Join(names, ", ")
}

// openSink opens the sink raw names. An unknown scheme, a malformed URL or
// an option the sink does not take is a usage error; credentials in the
// URL are registered with r first. A sink that cannot connect to its
// broker is a runtime error.
func openSink(ctx context.Context, raw string, o sinkOptions, r *redactor) (outbox.Sink, error) {
	name := sinkSchemeOf(raw)
	i := slices.IndexFunc(sinkSchemes, func(s sinkScheme) bool { return s.name == name })
	if i < 0 {
		if !schemeSyntax.MatchString(name) {
			return nil, usagef("invalid --sink: it has no URL scheme: use one of %s, such as nats://127.0.0.1:4222", schemeNames())
		}
		return nil, usagef("unknown sink scheme %q: use one of %s", clip(name), schemeNames())
	}
	s := sinkSchemes[i]
	registerSinkSecrets(r, raw, s.tokenUser)
	for _, opt := range []sinkOption{optSource, optRoute, optWebhook, optWebhookTLS} {
		how, given := o.given[opt]
		switch {
		case !given || slices.Contains(s.takes, opt):
		case opt == optWebhookTLS && s.name == "http":
			return nil, usagef("%s needs an https:// --sink: plain http has no TLS; use https://, or remove it", how)
		case opt == optWebhookTLS:
			return nil, usagef("%s does not apply to the %s sink: it is for https webhooks; a broker sink takes its CA and client certificate in the --sink URL (see TLS in docs/brokers.md), so remove it", how, s.name)
		default:
			return nil, usagef("%s does not apply to the %s sink: %s; remove it", how, s.name, optionScope(opt))
		}
	}
	return s.open(ctx, raw, o)
}

// optionScope says which sinks take opt.
func optionScope(opt sinkOption) string {
	var names []string
	for _, s := range sinkSchemes {
		if slices.Contains(s.takes, opt) {
			names = append(names, s.name)
		}
	}
	what := map[sinkOption]string{optSource: "a CloudEvents source", optRoute: "routing", optWebhook: "the webhook settings"}[opt]
	return what + " applies to " + strings.Join(names, ", ")
}

// commonFields points at the settings every broker sink's Config has.
type commonFields struct {
	router **route.Router
	source *string
	logger **slog.Logger
}

// brokerSink returns the open function of a broker sink package: parse its
// URL, apply the relay's routing, source and logger, and connect.
func brokerSink[C any, S outbox.Sink](
	parse func(string) (C, error),
	common func(*C) commonFields,
	connect func(context.Context, C) (S, error),
) func(context.Context, string, sinkOptions) (outbox.Sink, error) {
	return func(ctx context.Context, raw string, o sinkOptions) (outbox.Sink, error) {
		cfg, err := parse(raw)
		if err != nil {
			return nil, sinkConfigError(err)
		}
		f := common(&cfg)
		if o.Router != nil {
			if *f.router != nil {
				return nil, usagef("%s and the --sink URL's route option both set the route: keep one", o.given[optRoute])
			}
			*f.router = o.Router
		}
		if o.Source != "" {
			if *f.source != "" {
				return nil, usagef("%s and the --sink URL's source option both set the source: keep one", o.given[optSource])
			}
			*f.source = o.Source
		}
		*f.logger = o.Logger
		sink, err := connect(ctx, cfg)
		if err != nil {
			var ce *outbox.ConfigError
			if errors.As(err, &ce) {
				return nil, sinkConfigError(err)
			}
			return nil, err // the broker is down or refused us: exit 1
		}
		return sink, nil
	}
}

// openStdoutSink writes events as JSON lines to standard output.
func openStdoutSink(_ context.Context, _ string, o sinkOptions) (outbox.Sink, error) {
	return stdoutsink.New(o.Stdout), nil
}

// openWebhookSink POSTs each event to the URL as a CloudEvent, signed with
// --webhook-secret, over TLS with --webhook-ca, --webhook-cert and
// --webhook-key.
func openWebhookSink(_ context.Context, raw string, o sinkOptions) (outbox.Sink, error) {
	tlsCfg, err := o.webhookTLS()
	if err != nil {
		return nil, err
	}
	var allow []netip.Prefix
	for _, s := range o.WebhookAllowNetworks {
		p, err := egress.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, usagef("invalid %s: %v", o.flagName("webhook-allow-network"), err)
		}
		allow = append(allow, p)
	}
	sink, err := webhooksink.New(webhooksink.Config{
		URL:                 raw,
		Secret:              o.WebhookSecret,
		Source:              o.Source,
		Timeout:             o.Timeout,
		Concurrency:         o.Concurrency,
		Batch:               o.WebhookBatch,
		TLS:                 tlsCfg,
		DenyPrivateNetworks: o.WebhookDenyPrivate,
		AllowNetworks:       allow,
	})
	if err != nil {
		return nil, sinkConfigError(err)
	}
	return sink, nil
}

// webhookTLS reads the files --webhook-ca, --webhook-cert and
// --webhook-key name into the webhook's TLS configuration, or returns nil
// without them. An unusable file is a usage error naming the flag (or the
// config file key) that set it.
func (o sinkOptions) webhookTLS() (*tls.Config, error) {
	files := sinkurl.TLSFiles{CA: o.WebhookCA, Cert: o.WebhookCert, Key: o.WebhookKey}
	if files == (sinkurl.TLSFiles{}) {
		return nil, nil
	}
	names := sinkurl.TLSNames{
		CA: o.flagName("webhook-ca"), Cert: o.flagName("webhook-cert"), Key: o.flagName("webhook-key"),
		Field: func(name string) string { return name },
	}
	c, err := files.Load(names)
	if err != nil {
		var ce *outbox.ConfigError
		if errors.As(err, &ce) {
			return nil, usagef("invalid %s: %v", ce.Field, ce.Err)
		}
		return nil, &usageError{err: err}
	}
	return c, nil
}

// sinkFlagNames maps sink Config fields to the relay flags that set them.
var sinkFlagNames = map[string]string{
	"URL": "--sink", "Servers": "--sink", "Brokers": "--sink", "Secret": "--webhook-secret", "Source": "--source",
	"Concurrency": "--sink-concurrency", "Timeout": "--sink-timeout", "Batch": "--webhook-batch",
	"DenyPrivateNetworks": "--webhook-deny-private", "AllowNetworks": "--webhook-allow-network",
}

// sinkConfigError names the flag behind an invalid sink setting; every
// error in a sink's configuration is bad usage.
func sinkConfigError(err error) error {
	var ce *outbox.ConfigError
	if errors.As(err, &ce) {
		if name, ok := sinkFlagNames[ce.Field]; ok {
			return usagef("invalid %s: %v", name, ce.Err)
		}
		return usagef("invalid --sink: %v", err)
	}
	return &usageError{err: err}
}

// sinkURLParts takes a sink URL apart by hand, as the sink packages do for
// host lists that net/url refuses (nats://a:4222,b:4222): scheme,
// userinfo, authority (hosts), and the rest (path, query, fragment).
func sinkURLParts(raw string) (scheme, userinfo, hosts, rest string, ok bool) {
	scheme, after, ok := strings.Cut(raw, "://")
	if !ok {
		return "", "", "", "", false
	}
	end := strings.IndexAny(after, "/?#")
	if end < 0 {
		end = len(after)
	}
	authority, rest := after[:end], after[end:]
	// The password may hold an unescaped '@': the host follows the last.
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo, authority = authority[:at], authority[at+1:]
	}
	return scheme, userinfo, authority, rest, true
}

// registerSinkSecrets registers the credentials a sink URL may hold: the
// password (raw and percent-decoded), a token given as the user name
// (tokenUser), and query values whose names say they are secrets.
func registerSinkSecrets(r *redactor, raw string, tokenUser bool) {
	_, userinfo, _, rest, ok := sinkURLParts(raw)
	if !ok {
		return
	}
	user, pass, hasPass := strings.Cut(userinfo, ":")
	secrets := []string{pass}
	if tokenUser && !hasPass {
		secrets = append(secrets, user)
	}
	if _, query, found := strings.Cut(rest, "?"); found {
		query, _, _ = strings.Cut(query, "#")
		for _, kv := range strings.Split(query, "&") {
			k, v, _ := strings.Cut(kv, "=")
			if lk := strings.ToLower(k); strings.Contains(lk, "pass") || strings.Contains(lk, "token") || strings.Contains(lk, "secret") {
				secrets = append(secrets, v)
			}
		}
	}
	for _, s := range secrets {
		r.add(s)
		if d, err := url.PathUnescape(s); err == nil {
			r.add(d)
		}
	}
}

// describeSink names the sink raw points to for logs and metrics: scheme,
// hosts and, for brokers, the path (an AMQP vhost, a Redis database), with
// no userinfo and no query values. A webhook's path is left out too: it
// often carries a token.
func describeSink(raw string, r *redactor) string {
	scheme, _, hosts, rest, ok := sinkURLParts(raw)
	if !ok {
		// stdout: and other URLs without an authority hold no credentials
		// of their own.
		return r.String(sinkSchemeOf(raw) + ":")
	}
	scheme = strings.ToLower(scheme)
	path, query, _ := strings.Cut(rest, "?")
	path, _, _ = strings.Cut(path, "#")
	out := scheme + "://" + hosts
	switch scheme {
	case "http", "https":
		if rest != "" && rest != "/" {
			out += "/…"
		}
	default:
		out += path
		if query != "" {
			out += "?…"
		}
	}
	return r.String(out)
}

// describeSinkError wraps err from opening the sink with the sink's
// description.
func describeSinkError(desc string, err error) error {
	var ue *usageError
	if errors.As(err, &ue) {
		return err
	}
	return fmt.Errorf("sink %s: %w", desc, err)
}
