package redissink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/envelope"
	"github.com/outboxkit/outbox/route"
)

// Field names of the stream entries besides the CloudEvents attributes.
const (
	// FieldData holds the payload, byte for byte as stored.
	FieldData = "data"
	// FieldTraceParent and FieldTraceState hold the W3C trace context.
	FieldTraceParent = "traceparent"
	FieldTraceState  = "tracestate"
)

// Sink appends events to Redis streams with XADD. It is safe for
// concurrent use.
type Sink struct {
	cfg      Config
	client   redis.UniversalClient
	owned    bool // the sink made client and closes it
	router   *route.Router
	log      *slog.Logger
	endpoint string

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup // pipelines still running after Publish gave up on them
}

var _ outbox.Sink = (*Sink)(nil)

// New connects to the server (a PING) and returns a sink for cfg, with
// defaults filled in. It returns an *outbox.ConfigError naming the field
// when cfg is invalid, and a one-line error naming the server (never the
// password) when the server cannot be reached. Close the sink when done.
func New(ctx context.Context, cfg Config) (*Sink, error) {
	cfg = cfg.WithDefaults()
	opts, err := cfg.options()
	if err != nil {
		return nil, err
	}
	router := cfg.Router
	if router == nil {
		if router, err = route.New(""); err != nil {
			return nil, err
		}
	}
	s := &Sink{cfg: cfg, router: router, client: cfg.Client, endpoint: "redis client"}
	if opts != nil {
		s.client, s.owned, s.endpoint = redis.NewClient(opts), true, endpoint(cfg.URL)
	}
	s.log = cfg.Logger.With(slog.String("component", "redissink"), slog.String("server", s.endpoint))
	if err := s.client.Ping(ctx).Err(); err != nil {
		if s.owned {
			_ = s.client.Close()
		}
		return nil, fmt.Errorf("redissink: connect to %s: %w", s.endpoint, connectError(ctx, err))
	}
	return s, nil
}

// Client is the sink's Redis client, for a consumer that shares the sink's
// URL conventions and connection settings (redisinbox and outbox receive
// --from redis:// do). Close the sink, not the client.
func (s *Sink) Client() redis.UniversalClient { return s.client }

// connectError explains a failed PING.
func connectError(ctx context.Context, err error) error {
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("gave up: %w", context.Cause(ctx))
	case redis.HasErrorPrefix(err, "WRONGPASS") || redis.HasErrorPrefix(err, "NOAUTH") ||
		strings.Contains(err.Error(), "AUTH") && redis.HasErrorPrefix(err, "ERR"):
		return fmt.Errorf("the server refused the login: check the user and password in the URL: %w", err)
	case errors.As(err, new(*tls.CertificateVerificationError)):
		return fmt.Errorf("%w (set tls_ca in the URL, or Config.TLS.RootCAs, to the CA that signed the server's certificate, and tls_server_name if the certificate names another host)", err)
	case tlsRefused(err):
		return fmt.Errorf("%w (the server ended the TLS handshake: if it requires a client certificate, set tls_cert and tls_key in the URL, or Config.TLS.Certificates, to one signed by a CA it trusts)", err)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w (the server closed the connection at once: if it serves only TLS, use rediss://)", err)
	case errors.As(err, &ne):
		return fmt.Errorf("%w (is Redis running and reachable?)", err)
	}
	return err
}

// tlsRefused reports whether the server ended the TLS handshake with an
// alert, as one that requires a client certificate does.
func tlsRefused(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}

// String names the sink and its server, without credentials.
func (s *Sink) String() string { return "redissink(" + s.endpoint + ")" }

// LogValue logs the sink's configuration without credentials.
func (s *Sink) LogValue() slog.Value { return s.cfg.LogValue() }

// Close waits for pipelines still in flight and closes the client, unless
// it was given in Config.Client. Close is idempotent.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	var err error
	if s.owned {
		// Closing the pool first fails pipelines stuck on a silent server.
		err = s.client.Close()
	}
	s.wg.Wait()
	if err != nil {
		return fmt.Errorf("redissink: close the client of %s: %w", s.endpoint, err)
	}
	return nil
}

// Publish appends each event to its stream and returns one result per
// event, nil when all were appended. The batch's XADD commands travel in one
// pipeline, one round trip, and each gets its own reply: an event whose
// stream key holds another type of value gets a permanent error, while the
// others are appended. A connection failure fails the whole batch with a
// retryable error; go-redis retries it on a new connection first.
//
// With outbox.KeyOrdered(ctx), the batch goes in waves (see
// outbox.PublishKeyWaves), one pipeline each, with at most one XADD per
// aggregate: Redis runs a pipeline's commands in order, but one that fails
// (out of memory, a key of the wrong type) does not stop the ones behind
// it, so an aggregate's next event is sent only once the previous one was
// appended. A batch of distinct aggregates is a single pipeline.
func (s *Sink) Publish(ctx context.Context, events []outbox.Event) []error {
	if len(events) == 0 {
		return nil
	}
	errs := make([]error, len(events))
	args := make([]*redis.XAddArgs, len(events))
	idx := make([]int, 0, len(events))
	for i := range events {
		a, err := s.xaddArgs(&events[i])
		if err != nil {
			errs[i] = err
			continue
		}
		idx = append(idx, i)
		args[i] = a
	}
	switch {
	case outbox.KeyOrdered(ctx):
		outbox.PublishKeyWaves(events, errs, nil, func(wave []int) { s.run(ctx, events, wave, args, errs) })
	case len(idx) > 0:
		s.run(ctx, events, idx, args, errs)
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// run sends the pipeline. go-redis bounds its I/O by timeouts and ctx's
// deadline but not by ctx's cancellation, so the pipeline runs on a
// goroutine that Close waits for, and run returns as soon as ctx ends.
func (s *Sink) run(ctx context.Context, events []outbox.Event, idx []int, args []*redis.XAddArgs, errs []error) {
	type result struct {
		cmds []*redis.StringCmd
		err  error
	}
	done := make(chan result, 1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		for _, i := range idx {
			errs[i] = fmt.Errorf("redissink: event %d: not sent: the sink is closed", events[i].ID)
		}
		return
	}
	s.wg.Go(func() {
		pipe := s.client.Pipeline()
		cmds := make([]*redis.StringCmd, len(idx))
		for j, i := range idx {
			cmds[j] = pipe.XAdd(ctx, args[i])
		}
		_, err := pipe.Exec(ctx)
		done <- result{cmds, err}
	})
	s.mu.Unlock()
	select {
	case r := <-done:
		for j, i := range idx {
			if err := r.cmds[j].Err(); err != nil {
				errs[i] = s.xaddError(ctx, &events[i], args[i].Stream, err)
			}
		}
	case <-ctx.Done():
		for _, i := range idx {
			errs[i] = fmt.Errorf("redissink: event %d: gave up before the server answered: %w", events[i].ID, context.Cause(ctx))
		}
	}
}

// xaddArgs builds the XADD of e, or a permanent error.
func (s *Sink) xaddArgs(e *outbox.Event) (*redis.XAddArgs, error) {
	stream := s.router.Route(e)
	if stream == "" {
		return nil, outbox.Permanent(fmt.Errorf("redissink: event %d: the route gives an empty stream key: "+
			"set the route template or the event's %s header", e.ID, route.Header))
	}
	env := envelope.For(e, s.cfg.Source)
	values := make([]any, 0, 2*len(env.Attributes)+6)
	for _, a := range env.Attributes {
		values = append(values, a.Name, a.Value)
	}
	if env.Trace.TraceParent != "" {
		values = append(values, FieldTraceParent, env.Trace.TraceParent)
	}
	if env.Trace.TraceState != "" {
		values = append(values, FieldTraceState, env.Trace.TraceState)
	}
	values = append(values, FieldData, []byte(e.Payload))
	return &redis.XAddArgs{
		Stream: stream,
		MaxLen: s.cfg.MaxLen,
		Approx: s.cfg.MaxLen > 0 && !s.cfg.MaxLenExact,
		ID:     "*",
		Values: values,
	}, nil
}

// xaddError explains a failed XADD. Only a key of the wrong type is
// permanent: the other server errors (out of memory, a read-only replica,
// a missing ACL permission, loading) pass, or are fixed by an operator,
// and a retry then succeeds.
func (s *Sink) xaddError(ctx context.Context, e *outbox.Event, stream string, err error) error {
	prefix := "redissink: event " + strconv.FormatInt(e.ID, 10)
	var rerr redis.Error
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: gave up before the server answered: %w", prefix, context.Cause(ctx))
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		return outbox.Permanent(fmt.Errorf("%s: stream key %q holds a value that is not a stream: "+
			"route the event elsewhere or delete the key, then retry the event: %w", prefix, stream, err))
	case redis.HasErrorPrefix(err, "OOM"):
		return fmt.Errorf("%s: the server is out of memory: set a MAXLEN (the sink's maxlen option), trim or consume the streams, or raise maxmemory: %w", prefix, err)
	case redis.HasErrorPrefix(err, "NOPERM"):
		return fmt.Errorf("%s: the user may not XADD to %q: grant it the key and the xadd command in its ACL: %w", prefix, stream, err)
	case redis.HasErrorPrefix(err, "READONLY"):
		return fmt.Errorf("%s: the server is a read-only replica: point the URL at the primary: %w", prefix, err)
	case errors.As(err, &rerr):
		return fmt.Errorf("%s: XADD to %q: %w", prefix, stream, err)
	}
	// No reply at all: the connection failed (refused, reset, closed, a
	// name that does not resolve), which every event would meet.
	return outbox.Unavailable(fmt.Errorf("%s: XADD to %q on %s: %w", prefix, stream, s.endpoint, err))
}

// Health pings the server; the relay probes with it while the sink's
// circuit is open. It implements outbox.HealthChecker.
func (s *Sink) Health(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return outbox.Unavailable(fmt.Errorf("redissink: ping %s: %w", s.endpoint, err))
	}
	return nil
}

var _ outbox.HealthChecker = (*Sink)(nil)
