package cli

import (
	"errors"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/stdoutsink"
	"github.com/outboxkit/outbox/sink/webhooksink"
)

// sinkOptions are the relay settings and flags a sink may use.
type sinkOptions struct {
	Timeout       time.Duration // the relay's sink timeout: bound on one publish
	WebhookSecret string
	Concurrency   int
	Source        string
	Stdout        io.Writer
	Logger        *slog.Logger
}

// sinkScheme opens the sink for one --sink URL scheme.
type sinkScheme struct {
	name string
	open func(u *url.URL, o sinkOptions) (outbox.Sink, error)
}

// sinkSchemes is every --sink URL scheme, in the order the help lists them.
// A new sink adds one entry here and one open function.
var sinkSchemes = []sinkScheme{
	{name: "stdout", open: openStdoutSink},
	{name: "http", open: openWebhookSink},
	{name: "https", open: openWebhookSink},
}

// openSink opens the sink raw names. An unknown scheme or a malformed URL is
// a usage error; credentials in the URL are registered with r first.
func openSink(raw string, o sinkOptions, r *redactor) (outbox.Sink, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the URL; keep the cause only, the URL may hold
		// credentials.
		cause := err
		var ue *url.Error
		if errors.As(err, &ue) {
			cause = ue.Err
		}
		return nil, usagef("invalid --sink URL: %v", cause)
	}
	if u.User != nil {
		pw, _ := u.User.Password()
		r.add(pw)
	}
	scheme := u.Scheme
	if scheme == "" && u.Host == "" && !strings.ContainsAny(raw, ":/") {
		scheme = raw // "stdout" as well as "stdout:"
	}
	for _, s := range sinkSchemes {
		if s.name == strings.ToLower(scheme) {
			sink, err := s.open(u, o)
			if err != nil {
				return nil, sinkConfigError(err)
			}
			return sink, nil
		}
	}
	names := make([]string, len(sinkSchemes))
	for i, s := range sinkSchemes {
		names[i] = s.name
	}
	return nil, usagef("unknown sink scheme %q: use one of %s", scheme, strings.Join(names, ", "))
}

// describeSink names the sink raw points to, without credentials.
func describeSink(raw string, r *redactor) string {
	if u, err := url.Parse(raw); err == nil {
		raw = u.Redacted()
	}
	return r.String(raw)
}

// openStdoutSink writes events as JSON lines to standard output.
func openStdoutSink(_ *url.URL, o sinkOptions) (outbox.Sink, error) {
	return stdoutsink.New(o.Stdout), nil
}

// openWebhookSink POSTs each event to the URL as a CloudEvent, signed with
// --webhook-secret.
func openWebhookSink(u *url.URL, o sinkOptions) (outbox.Sink, error) {
	return webhooksink.New(webhooksink.Config{
		URL:         u.String(),
		Secret:      o.WebhookSecret,
		Source:      o.Source,
		Timeout:     o.Timeout,
		Concurrency: o.Concurrency,
	})
}

// sinkFlagNames maps sink Config fields to the relay flags that set them.
var sinkFlagNames = map[string]string{
	"URL": "--sink", "Secret": "--webhook-secret", "Source": "--source",
	"Concurrency": "--sink-concurrency", "Timeout": "--sink-timeout",
}

// sinkConfigError names the flag behind an invalid sink setting; every
// error opening a sink is bad usage.
func sinkConfigError(err error) error {
	var ce *outbox.ConfigError
	if errors.As(err, &ce) {
		if name, ok := sinkFlagNames[ce.Field]; ok {
			return usagef("invalid %s: %v", name, ce.Err)
		}
	}
	return &usageError{err: err}
}
