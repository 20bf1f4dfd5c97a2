package webhooksink

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/egress"
)

// Sink POSTs events to a webhook endpoint. It is safe for concurrent use.
type Sink struct {
	cfg      Config
	url      *url.URL
	rawURL   string
	endpoint string // redacted, for errors
	client   *http.Client
	signer   *standardwebhooks.Webhook // nil when unsigned
	sem      chan struct{}             // bounds requests in flight across Publish calls
	secrets  []string                  // cut out of response bodies quoted in errors
}

var _ outbox.Sink = (*Sink)(nil)

// New returns a sink for cfg, with defaults filled in. It returns an
// *outbox.ConfigError naming the field when cfg is invalid.
func New(cfg Config) (*Sink, error) {
	cfg = cfg.WithDefaults()
	u, signer, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Sink{
		cfg:      cfg,
		url:      u,
		rawURL:   u.String(),
		endpoint: redactURL(u),
		signer:   signer,
		sem:      make(chan struct{}, cfg.Concurrency),
	}
	s.client = newClient(cfg)
	if cfg.Secret != "" {
		s.secrets = append(s.secrets, cfg.Secret, strings.TrimPrefix(cfg.Secret, secretPrefix))
	}
	if u.User != nil {
		// net/http sends userinfo as Basic authentication.
		name := u.User.Username()
		if p, ok := u.User.Password(); ok && p != "" {
			s.secrets = append(s.secrets, p, base64.StdEncoding.EncodeToString([]byte(name+":"+p)))
		} else if name != "" {
			s.secrets = append(s.secrets, name) // https://TOKEN@host
		}
	}
	// Errors name the endpoint without its path and query, which may hold
	// tokens; an echo of the request line must not bring them back.
	if u.Path != "" && u.Path != "/" {
		s.secrets = append(s.secrets, u.EscapedPath(), u.Path)
	}
	if u.RawQuery != "" {
		s.secrets = append(s.secrets, u.RawQuery)
	}
	for _, v := range cfg.Headers {
		if v = strings.TrimSpace(v); v != "" {
			s.secrets = append(s.secrets, v)
			// "Bearer <token>": an echo may quote the token alone.
			if f := strings.Fields(v); len(f) > 1 {
				s.secrets = append(s.secrets, f[len(f)-1])
			}
		}
	}
	// Longest first, so a secret that contains another is cut whole.
	slices.SortFunc(s.secrets, func(a, b string) int { return len(b) - len(a) })
	return s, nil
}

// newClient returns the client for cfg: a copy of cfg.Client, or a client
// with its own transport, that never follows redirects.
func newClient(cfg Config) *http.Client {
	var c http.Client
	if cfg.Client != nil {
		c = *cfg.Client
	} else {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// The default of 2 idle connections per host would make a batch
		// of Concurrency requests open and close connections every time.
		// No more than Concurrency connections either: a request that
		// finds none idle would otherwise dial one more, which the idle
		// pool then closes (measured: 7 connections opened for 4 requests
		// in flight over HTTP/1.1).
		t.MaxIdleConnsPerHost = cfg.Concurrency
		t.MaxIdleConns = max(t.MaxIdleConns, cfg.Concurrency)
		t.MaxConnsPerHost = cfg.Concurrency
		// HTTP/2 where an https endpoint offers it (ALPN), also with the
		// custom TLS configuration and dialer below, which would turn it
		// off without this (the clone keeps it; this says it is meant).
		t.ForceAttemptHTTP2 = true
		if cfg.TLS != nil {
			t.TLSClientConfig = cfg.TLS.Clone()
		}
		if cfg.DenyPrivateNetworks {
			// The same dialer settings as the default transport's, with
			// every dialed address checked; no proxy, which would dial on
			// the sink's behalf.
			d := egress.Policy{DenyPrivate: true, Allow: cfg.AllowNetworks}.Guard(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second})
			t.DialContext = d.DialContext
			t.Proxy = nil
		}
		c.Transport = t
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

// Close closes the client's idle connections. The sink remains usable;
// later requests open new connections.
func (s *Sink) Close() error {
	s.client.CloseIdleConnections()
	return nil
}

// String names the sink and its endpoint, redacted.
func (s *Sink) String() string { return "webhooksink(" + s.endpoint + ")" }

// LogValue logs the sink's configuration, redacted.
func (s *Sink) LogValue() slog.Value { return s.cfg.LogValue() }

// Publish POSTs each event and returns one result per event, nil when all
// were delivered. Requests go out concurrently, at most Config.Concurrency
// at a time across all Publish calls. When ctx ends, requests in flight are
// aborted and events not yet sent get ctx's error; all are retryable.
//
// With outbox.KeyOrdered(ctx), one aggregate's events are sent one after
// another, each once the previous one got its 2xx, while different
// aggregates still go concurrently; once an event fails, the later events
// of its aggregate are not sent and get outbox.ErrEarlierEventFailed.
func (s *Sink) Publish(ctx context.Context, events []outbox.Event) []error {
	if len(events) == 0 {
		return nil
	}
	if s.cfg.Batch > 1 {
		return s.publishBatches(ctx, events)
	}
	errs := make([]error, len(events))
	workers := min(s.cfg.Concurrency, len(events))
	switch {
	case outbox.KeyOrdered(ctx):
		outbox.PublishKeyRuns(events, errs, workers, func(i int) error { return s.send(ctx, &events[i]) })
	case workers == 1:
		for i := range events {
			errs[i] = s.send(ctx, &events[i])
		}
	default:
		var (
			next atomic.Int64
			wg   sync.WaitGroup
		)
		for range workers {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < len(events); i = int(next.Add(1) - 1) {
					errs[i] = s.send(ctx, &events[i])
				}
			})
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// send delivers one event.
func (s *Sink) send(ctx context.Context, e *outbox.Event) error {
	release, err := s.acquire(ctx, e)
	if err != nil {
		return err
	}
	defer release()

	reqCtx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := s.newRequest(reqCtx, e)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return s.transportError(ctx, e, err)
	}
	// Drained and closed on every path so the connection is reused.
	defer func() {
		_, _ = io.CopyN(io.Discard, resp.Body, drainMax)
		_ = resp.Body.Close()
	}()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	return s.statusError(e, resp)
}

// acquire takes one of the Concurrency requests in flight for a request
// that carries e (first), and returns its release; or an error when ctx
// ends first.
func (s *Sink) acquire(ctx context.Context, e *outbox.Event) (release func(), err error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("webhooksink: event %d: not sent: %w", e.ID, context.Cause(ctx))
	}
	if err := ctx.Err(); err != nil {
		// Both cases of the select were ready and the semaphore won.
		<-s.sem
		return nil, fmt.Errorf("webhooksink: event %d: not sent: %w", e.ID, context.Cause(ctx))
	}
	return func() { <-s.sem }, nil
}

// newRequest builds the CloudEvents binary-mode request for e.
func (s *Sink) newRequest(ctx context.Context, e *outbox.Event) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.rawURL, bytes.NewReader(e.Payload))
	if err != nil {
		// The URL was validated in New, so this is unexpected; do not
		// quote err, which may quote the URL.
		return nil, outbox.Permanent(fmt.Errorf("webhooksink: event %d: cannot build a request for %s", e.ID, s.endpoint))
	}
	for name, value := range s.cfg.Headers {
		req.Header.Set(name, value)
	}
	req.Header.Set("User-Agent", s.cfg.UserAgent)
	setCloudEventHeaders(req.Header, s.cfg.Source, e)
	if s.signer != nil {
		id := e.UniqueID()
		ts := time.Now()
		sig, err := s.signer.Sign(id, ts, e.Payload)
		if err != nil {
			return nil, fmt.Errorf("webhooksink: event %d: sign: %w", e.ID, err)
		}
		req.Header.Set(standardwebhooks.HeaderWebhookID, id)
		req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
		req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	}
	return req, nil
}
