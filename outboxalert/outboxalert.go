// Package outboxalert posts dead-lettered events to an alert webhook (a
// chat incoming webhook, an incident tool, a small service of your own).
//
// An Alerter is an outbox.HookDeadLetter: add it to RelayConfig.Hooks. The
// relay already logs every dead letter at error level; the Alerter adds the
// webhook. It never blocks the relay: OnDeadLetter only records the event,
// and a goroutine the Alerter owns sends at most one request per Interval.
// The first dead letter after a quiet interval is posted at once; the ones
// that arrive while the interval runs are summed into one summary request
// (a count, the first few events, the count per type), so a flood of
// failures sends a handful of requests, not thousands.
//
//	alerter, err := outboxalert.New(outboxalert.Config{URL: os.Getenv("ALERT_WEBHOOK"), Schema: "public"})
//	...
//	defer alerter.Close(ctx) // sends what is pending
//	relay, err := outbox.NewRelay(db, outbox.RelayConfig{Sink: sink, Hooks: []outbox.Hook{alerter}})
//
// The request body is an Alert in JSON; docs/observability.md shows one.
// The webhook URL may hold credentials (userinfo, a token in the path or
// query): the Alerter's logs and errors name only its scheme and host.
package outboxalert

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
)

// Defaults; Config.WithDefaults fills zero fields with them.
const (
	// IntervalDefault is the least time between two alert requests.
	IntervalDefault = time.Minute
	// MaxEventsDefault is how many events a summary details.
	MaxEventsDefault = 20
	// RetriesDefault is how many times a failed request is retried.
	RetriesDefault = 3
	// RetryBackoffDefault is the wait before the first retry; it doubles
	// for each retry after.
	RetryBackoffDefault = time.Second
	// TimeoutDefault bounds one request.
	TimeoutDefault = 10 * time.Second
)

// retryBackoffMax bounds Config.RetryBackoff, which doubles up to 10 times.
const retryBackoffMax = time.Hour

// maxTypes bounds the event_types of a summary; further types count under
// OtherTypes.
const maxTypes = 50

// maxTenants bounds the tenants an alert lists.
const maxTenants = 20

// OtherTypes is the event_types key that counts the types past the first
// 50 of a summary.
const OtherTypes = "_other"

// Config configures an Alerter.
type Config struct {
	// URL receives a POST per alert. Required: http or https.
	URL string
	// Header is added to every request, such as an Authorization header.
	Header http.Header
	// Interval is the least time between two requests: dead letters that
	// arrive sooner after the last request are summed into the next.
	// Defaults to IntervalDefault.
	Interval time.Duration
	// MaxEvents is how many events an alert details; the count and the
	// count per type cover all of them. Defaults to MaxEventsDefault.
	MaxEvents int
	// Retries is how many times a request that failed (a network error, a
	// 5xx, 408 or 429) is tried again before the alert is dropped.
	// Defaults to RetriesDefault; negative means never.
	Retries int
	// RetryBackoff is the wait before the first retry, doubled for each
	// next one. Defaults to RetryBackoffDefault.
	RetryBackoff time.Duration
	// Timeout bounds one request. Defaults to TimeoutDefault.
	Timeout time.Duration
	// Client sends the requests. Defaults to a client of its own. Its
	// CheckRedirect is replaced (on a copy) so redirects are never
	// followed: a redirect would carry Header (an API key) to wherever the
	// webhook points it. A 3xx answer is an error naming its target; set
	// URL to the final URL.
	Client *http.Client
	// Schema names the outbox table's schema in alerts. Defaults to
	// outbox.SchemaDefault.
	Schema string
	// RelayID names the relay in alerts. Defaults to the relay that
	// dead-lettered the first event of the alert (its locked_by).
	RelayID string
	// Logger receives a line when an alert cannot be delivered. Defaults
	// to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Interval = cmp.Or(c.Interval, IntervalDefault)
	c.MaxEvents = cmp.Or(c.MaxEvents, MaxEventsDefault)
	c.Retries = cmp.Or(c.Retries, RetriesDefault)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, RetryBackoffDefault)
	c.Timeout = cmp.Or(c.Timeout, TimeoutDefault)
	c.Schema = cmp.Or(c.Schema, outbox.SchemaDefault)
	// A copy, so the caller's client is left as it was.
	client := http.Client{}
	if c.Client != nil {
		client = *c.Client
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.Client = &client
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// Validate reports the first invalid field as an *outbox.ConfigError.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &outbox.ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
	}
	if c.URL == "" {
		return bad("URL", "is empty: set the webhook that receives alerts, such as https://alerts.example.com/outbox")
	}
	if _, err := parseURL(c.URL); err != nil {
		return &outbox.ConfigError{Field: "URL", Err: err}
	}
	switch {
	case c.Interval < 0:
		return bad("Interval", "is %v: use a positive duration", c.Interval)
	case c.MaxEvents < 0:
		return bad("MaxEvents", "is %d: use a positive number", c.MaxEvents)
	case c.RetryBackoff < 0:
		return bad("RetryBackoff", "is %v: use a positive duration", c.RetryBackoff)
	case c.RetryBackoff > retryBackoffMax:
		// It doubles up to 10 times: past this it would overflow.
		return bad("RetryBackoff", "is %v: use at most %v", c.RetryBackoff, retryBackoffMax)
	case c.Timeout < 0:
		return bad("Timeout", "is %v: use a positive duration", c.Timeout)
	}
	return nil
}

// parseURL checks a webhook URL; its errors never quote the URL, which may
// hold credentials.
func parseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("is not a URL (%w): use http://host/path or https://host/path", err)
	}
	if s := strings.ToLower(u.Scheme); s != "http" && s != "https" {
		return nil, fmt.Errorf("has scheme %q: use an http:// or https:// URL", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("has no host: use http://host/path or https://host/path")
	}
	return u, nil
}

// Alerter posts dead-lettered events to a webhook, rate-limited. Make one
// with New and Close it when the relay has stopped.
type Alerter struct {
	cfg    Config
	target string // scheme://host: the URL as logs may show it
	log    *slog.Logger

	wake    chan struct{}
	closing chan struct{}
	done    chan struct{}
	ctx     context.Context // cancelled when Close gives up waiting
	cancel  context.CancelFunc
	now     func() time.Time

	mu        sync.Mutex
	pending   *Alert // dead letters not yet sent, nil when none
	closed    bool
	closeOnce sync.Once
}

// New returns an Alerter and starts its sending goroutine; Close stops it.
func New(cfg Config) (*Alerter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u, _ := parseURL(cfg.URL)
	ctx, cancel := context.WithCancel(context.Background())
	a := &Alerter{
		cfg: cfg, target: u.Scheme + "://" + u.Host,
		wake: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{}),
		ctx: ctx, cancel: cancel, now: time.Now,
	}
	a.log = cfg.Logger.With(slog.String("component", "outboxalert"), slog.String("webhook", a.target))
	go a.loop()
	return a, nil
}

// OnDeadLetter records a dead-lettered event for the next alert. It never
// blocks on the webhook. It implements outbox.HookDeadLetter.
func (a *Alerter) OnDeadLetter(_ context.Context, e outbox.Event, err error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.add(e, err)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

var _ outbox.HookDeadLetter = (*Alerter)(nil)

// Close sends the dead letters still pending at once, ignoring the
// interval, and stops the sending goroutine. If ctx ends first, the request
// in flight is cancelled, Close waits for the goroutine to return and
// returns ctx.Err(). Dead letters reported after Close are ignored.
func (a *Alerter) Close(ctx context.Context) error {
	a.closeOnce.Do(func() {
		a.mu.Lock()
		a.closed = true
		a.mu.Unlock()
		close(a.closing)
	})
	defer a.cancel()
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
		a.cancel()
		<-a.done
		return ctx.Err()
	}
}

// loop sends pending alerts, at most one request per interval, until Close.
func (a *Alerter) loop() {
	defer close(a.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var lastSent time.Time
	for {
		select {
		case <-a.closing:
			if alert := a.take(); alert != nil {
				a.send(alert)
			}
			return
		case <-a.wake:
		case <-timer.C:
		}
		if !lastSent.IsZero() {
			if wait := lastSent.Add(a.cfg.Interval).Sub(a.now()); wait > 0 {
				timer.Reset(wait)
				continue
			}
		}
		alert := a.take()
		if alert == nil {
			continue
		}
		lastSent = a.now()
		a.send(alert)
	}
}

// take returns the pending alert, finished for sending, and starts a new one.
func (a *Alerter) take() *Alert {
	a.mu.Lock()
	defer a.mu.Unlock()
	alert := a.pending
	a.pending = nil
	if alert != nil {
		alert.finish(a.now())
	}
	return alert
}
