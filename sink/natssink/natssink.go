package natssink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/sinkurl"
)

// Sink publishes events to NATS JetStream. It is safe for concurrent use.
type Sink struct {
	cfg     Config
	nc      *nats.Conn
	js      jetstream.JetStream
	servers string   // for errors and String; never holds credentials
	secrets []string // cut out of error text
	log     *slog.Logger

	closeOnce sync.Once
}

var _ outbox.Sink = (*Sink)(nil)

// New connects to NATS, checks that JetStream answers (and that Stream
// exists, creating it when CreateStream is set) and returns the sink. It
// returns an *outbox.ConfigError naming the field when cfg is invalid, and
// a one-line error saying what to check when the servers cannot be reached
// or refuse the credentials. Errors never hold credentials. Dialing is
// bounded by ConnectTimeout per server; ctx bounds the JetStream checks.
// Close the sink when done.
func New(ctx context.Context, cfg Config) (*Sink, error) {
	cfg = cfg.WithDefaults()
	servers, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Sink{
		cfg:     cfg,
		servers: strings.Join(servers, ","),
		log:     cfg.Logger.With(slog.String("component", "natssink")),
	}
	for _, secret := range []string{cfg.Password, cfg.Token} {
		if secret != "" {
			s.secrets = append(s.secrets, secret)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("natssink: connect to %s: %w", s.servers, err)
	}
	nc, err := nats.Connect(strings.Join(servers, ","), s.options()...)
	if err != nil {
		return nil, s.connectError(err)
	}
	s.nc = nc
	s.js, err = jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxPending),
		jetstream.WithPublishAsyncTimeout(cfg.AckTimeout),
	)
	if err == nil {
		err = s.checkJetStream(ctx)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	s.log.Debug("connected", slog.String("server", nc.ConnectedUrlRedacted()))
	return s, nil
}

// Conn is the sink's connection to NATS, for a consumer that shares the
// sink's URL conventions and connection settings (natsinbox and outbox
// receive --from nats:// do). Close the sink, not the connection.
func (s *Sink) Conn() *nats.Conn { return s.nc }

// options are the client options for s.cfg.
func (s *Sink) options() []nats.Option {
	cfg := s.cfg
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.Timeout(cfg.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(cfg.ReconnectWait),
		// No reconnect buffer: a publish while disconnected fails at once
		// (retryably) instead of being sent minutes later, after its
		// Publish call has long reported it failed.
		nats.ReconnectBufSize(-1),
		nats.NoCallbacksAfterClientClose(),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				s.log.Warn("connection to NATS lost; reconnecting", slog.String("error", s.scrub(err.Error())))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			s.log.Info("reconnected to NATS", slog.String("server", nc.ConnectedUrlRedacted()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			s.log.Warn("NATS error", slog.String("error", s.scrub(err.Error())))
		}),
	}
	switch {
	case cfg.Token != "":
		opts = append(opts, nats.Token(cfg.Token))
	case cfg.User != "":
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	case cfg.CredsFile != "":
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.TLS != nil {
		opts = append(opts, nats.Secure(cfg.TLS))
	}
	return opts
}

// connectError explains a failed connect in one line.
func (s *Sink) connectError(err error) error {
	hint := "check that nats-server is running there and reachable from here"
	switch {
	case errors.Is(err, nats.ErrAuthorization):
		hint = "the server refused the credentials: check the user and password, token or credentials file"
	case errors.Is(err, nats.ErrSecureConnRequired):
		hint = "the server requires TLS: add ?tls=true to the URL or set Config.TLS"
	case errors.Is(err, nats.ErrSecureConnWanted):
		hint = "the server does not offer TLS: drop the tls option"
	case errors.As(err, new(*tls.CertificateVerificationError)):
		hint = "the server's TLS certificate does not verify: set tls_ca to the CA that signed it (and tls_server_name if the certificate names another host)"
	case tlsRefused(err) || errors.Is(err, nats.ErrTLS):
		hint = "the server ended the TLS handshake: if it requires a client certificate, set tls_cert and tls_key to one signed by a CA it trusts"
	}
	return fmt.Errorf("natssink: cannot connect to %s: %s; %s", s.servers, s.scrub(err.Error()), hint)
}

// tlsRefused reports whether the server ended the TLS handshake with an
// alert, as one that requires a client certificate does.
func tlsRefused(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}

// checkJetStream makes sure publishes have a JetStream to go to, and the
// configured stream exists.
func (s *Sink) checkJetStream(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AckTimeout)
	defer cancel()
	if _, err := s.js.AccountInfo(ctx); err != nil {
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return fmt.Errorf("natssink: %s: JetStream is not enabled for this account: start nats-server with -js (or enable JetStream for the account)", s.servers)
		}
		return fmt.Errorf("natssink: %s: JetStream did not answer: %s; check that JetStream is enabled and the account may use it", s.servers, s.scrub(err.Error()))
	}
	if s.cfg.Stream == "" {
		return nil
	}
	_, err := s.js.Stream(ctx, s.cfg.Stream)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("natssink: look up stream %q: %s", s.cfg.Stream, s.scrub(err.Error()))
	case !s.cfg.CreateStream:
		return fmt.Errorf("natssink: stream %q does not exist: create it (nats stream add %s --subjects 'order.>') or set create_stream=true and stream_subjects", s.cfg.Stream, s.cfg.Stream)
	}
	_, err = s.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        s.cfg.Stream,
		Subjects:    s.cfg.StreamSubjects,
		Storage:     jetstream.FileStorage,
		Duplicates:  s.cfg.DuplicateWindow,
		Description: "created by outbox natssink",
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // created meanwhile by another relay
		return fmt.Errorf("natssink: create stream %q for subjects %v: %s", s.cfg.Stream, s.cfg.StreamSubjects, s.scrub(err.Error()))
	}
	s.log.Info("created stream", slog.String("stream", s.cfg.Stream), slog.Any("subjects", s.cfg.StreamSubjects))
	return nil
}

// Close closes the connection. Publishes still waiting for acks fail,
// retryably. Close is idempotent.
func (s *Sink) Close() error {
	s.closeOnce.Do(s.nc.Close)
	return nil
}

// Health reports whether the connection to NATS is up and answers a
// round trip; the relay probes with it while the sink's circuit is open.
// It implements outbox.HealthChecker.
func (s *Sink) Health(ctx context.Context) error {
	if !s.nc.IsConnected() {
		return outbox.Unavailable(fmt.Errorf("natssink: %s: not connected (%s)", s.servers, s.nc.Status()))
	}
	if _, ok := ctx.Deadline(); !ok {
		// FlushWithContext refuses a context without a deadline.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.AckTimeout)
		defer cancel()
	}
	if err := s.nc.FlushWithContext(ctx); err != nil {
		return outbox.Unavailable(fmt.Errorf("natssink: %s: no answer to a ping: %s", s.servers, s.scrub(err.Error())))
	}
	return nil
}

var _ outbox.HealthChecker = (*Sink)(nil)

// String names the sink and its servers, without credentials.
func (s *Sink) String() string { return "natssink(" + s.servers + ")" }

// LogValue logs the sink's configuration without credentials.
func (s *Sink) LogValue() slog.Value { return s.cfg.LogValue() }

// Publish publishes every event asynchronously, then waits for all of their
// JetStream acks, and returns one result per event (nil when all were
// stored). An event whose subject is invalid, whose message is too large or
// that no stream stores fails permanently; lost connections, missing acks
// and a context that ends are retryable.
//
// With outbox.KeyOrdered(ctx), the batch goes in waves (see
// outbox.PublishKeyWaves): each wave has at most one message per aggregate
// in flight, and an aggregate's next message is published only once the
// previous one was acked. JetStream stores one connection's messages in the
// order they were sent, but a message that fails (no stream, a full
// stream, a lost ack) does not stop the ones behind it, so one aggregate's
// messages cannot share a pipeline. A batch of distinct aggregates is a
// single wave.
func (s *Sink) Publish(ctx context.Context, events []outbox.Event) []error {
	if len(events) == 0 {
		return nil
	}
	errs := make([]error, len(events))
	subjects := make([]string, len(events))
	for i := range events {
		subjects[i] = s.cfg.Router.Route(&events[i])
		if err := checkSubject(subjects[i]); err != nil {
			errs[i] = outbox.Permanent(fmt.Errorf("natssink: event %d: subject %w", events[i].ID, err))
		}
	}
	opts := s.publishOpts(ctx)
	if outbox.KeyOrdered(ctx) {
		outbox.PublishKeyWaves(events, errs, nil, func(wave []int) { s.publish(ctx, events, subjects, wave, opts, errs) })
	} else {
		idx := make([]int, 0, len(events))
		for i, err := range errs {
			if err == nil {
				idx = append(idx, i)
			}
		}
		s.publish(ctx, events, subjects, idx, opts, errs)
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// publish publishes the events at idx asynchronously, waits for their
// acks and sets their results in errs.
func (s *Sink) publish(ctx context.Context, events []outbox.Event, subjects []string, idx []int, opts []jetstream.PublishOpt, errs []error) {
	futures := make([]jetstream.PubAckFuture, len(idx))
	for j, i := range idx {
		e := &events[i]
		if ctx.Err() != nil {
			errs[i] = fmt.Errorf("natssink: event %d: not published: %w", e.ID, context.Cause(ctx))
			continue
		}
		f, err := s.js.PublishMsgAsync(newMsg(subjects[i], s.cfg.Source, e), opts...)
		if err != nil {
			errs[i] = s.publishError(ctx, e, subjects[i], err)
			continue
		}
		futures[j] = f
	}
	for j, f := range futures {
		if f == nil {
			continue
		}
		i := idx[j]
		if err := s.wait(ctx, f); err != nil {
			errs[i] = s.publishError(ctx, &events[i], subjects[i], err)
		}
	}
}

// publishOpts are the options of one message's publish.
func (s *Sink) publishOpts(ctx context.Context) []jetstream.PublishOpt {
	retries := s.cfg.NoStreamRetries
	if retries < 0 {
		retries = 0
	}
	// A batch larger than MaxPending waits for acks to free room, but no
	// longer than an ack may take, nor past ctx's deadline.
	stall := s.cfg.AckTimeout
	if d, ok := ctx.Deadline(); ok {
		stall = max(min(stall, time.Until(d)), time.Millisecond)
	}
	opts := []jetstream.PublishOpt{jetstream.WithRetryAttempts(retries), jetstream.WithStallWait(stall)}
	if s.cfg.Stream != "" {
		opts = append(opts, jetstream.WithExpectStream(s.cfg.Stream))
	}
	return opts
}

// wait returns f's outcome, or ctx's error if ctx ends first. An outcome
// that is already known wins over a context that has ended.
func (s *Sink) wait(ctx context.Context, f jetstream.PubAckFuture) error {
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	default:
	}
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-ctx.Done():
		return errNoAck{cause: context.Cause(ctx)}
	}
}

// scrub cuts credentials out of text from the client library.
func (s *Sink) scrub(text string) string { return sinkurl.Scrub(text, s.secrets...) }
