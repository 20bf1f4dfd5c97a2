package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
)

// sinkStates records a relay's circuit changes.
type sinkStates struct {
	mu     sync.Mutex
	states []outbox.CircuitState
	errs   []error
}

func (s *sinkStates) OnSinkState(_ context.Context, st outbox.SinkState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states = append(s.states, st.Circuit)
	s.errs = append(s.errs, st.Err)
}

func (s *sinkStates) count(state outbox.CircuitState) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.states {
		if st == state {
			n++
		}
	}
	return n
}

// closedPort returns a loopback address nothing listens on: connections to
// it are refused.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// receiver is a webhook endpoint; answer decides each request's status.
type receiver struct {
	mu   sync.Mutex
	ids  map[string]int
	srv  *http.Server
	done chan struct{}
}

// serveWebhook starts a receiver on addr.
func serveWebhook(t *testing.T, addr string, answer func(r *http.Request) int) *receiver {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	rc := &receiver{ids: map[string]int{}, done: make(chan struct{})}
	rc.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		code := answer(r)
		if code == http.StatusOK {
			rc.mu.Lock()
			rc.ids[r.Header.Get("ce-id")]++
			rc.mu.Unlock()
		}
		w.WriteHeader(code)
	})}
	go func() {
		defer close(rc.done)
		_ = rc.srv.Serve(l)
	}()
	t.Cleanup(func() {
		_ = rc.srv.Close()
		<-rc.done
	})
	return rc
}

func (rc *receiver) received() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.ids)
}

// httpSink posts each event to a URL, one request at a time, as a webhook
// sink does: a refused dial comes back as the dial error itself, a 2xx is a
// delivery, 4xx other than 408 and 429 is permanent, anything else retryable.
// The root module's tests cannot import sink/webhooksink (its own module).
type httpSink struct {
	url    string
	client *http.Client
}

func newWebhookSink(t *testing.T, addr string) *httpSink {
	t.Helper()
	return &httpSink{url: "http://" + addr + "/hook", client: &http.Client{Timeout: 2 * time.Second}}
}

func (s *httpSink) String() string { return "httpsink(" + s.url + ")" }

func (s *httpSink) Publish(ctx context.Context, events []outbox.Event) []error {
	errs := make([]error, len(events))
	for i, e := range events {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(e.Payload))
		if err != nil {
			errs[i] = outbox.Permanent(err)
			continue
		}
		req.Header.Set("ce-id", strconv.FormatInt(e.ID, 10))
		req.Header.Set("ce-subject", e.AggregateID)
		resp, err := s.client.Do(req)
		if err != nil {
			errs[i] = err
			continue
		}
		_ = resp.Body.Close()
		switch code := resp.StatusCode; {
		case code >= 200 && code < 300:
		case code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests:
			errs[i] = outbox.Permanent(fmt.Errorf("answered %s", resp.Status))
		default:
			errs[i] = fmt.Errorf("answered %s", resp.Status)
		}
	}
	return errs
}

// attemptsSpent sums the attempts of every event in the table.
func (b relayBundle) attemptsSpent(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx,
		fmt.Sprintf(`SELECT coalesce(sum(attempts), 0) FROM %q.outbox_events`, b.schema)).Scan(&n))
	return n
}

func TestRelaySinkDownSpendsNoAttempts(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	addr := closedPort(t)
	logs := &logBuffer{}
	logs.dumpOnFailure(t)
	states := &sinkStates{}
	ids := b.write(t, 25, nil)
	// Three attempts 10-40ms apart would dead-letter every event within a
	// tenth of a second; the endpoint stays down far longer.
	r := b.start(t, outbox.RelayConfig{
		Sink: newWebhookSink(t, addr), BatchSize: 10, Workers: 2, MaxAttempts: 3,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 40 * time.Millisecond,
		ProbeInterval: 20 * time.Millisecond, ProbeIntervalMax: 100 * time.Millisecond,
		Logger: logs.logger(), Hooks: []outbox.Hook{states},
	})
	testutil.WaitFor(t, 20*time.Second, "the circuit opened and five probes failed", func() bool {
		return states.count(outbox.CircuitOpen) >= 6
	})
	require.Equal(t, outbox.CircuitOpen, r.SinkCircuit())
	require.Zero(t, b.attemptsSpent(t), "an unreachable sink spends no attempts")
	st := b.stats(t)
	require.Zero(t, st.Failed, "nothing dead-lettered")
	require.Zero(t, st.Processed)
	require.Equal(t, int64(len(ids)), st.Pending+st.Processing)
	states.mu.Lock()
	require.ErrorIs(t, states.errs[0], syscall.ECONNREFUSED)
	states.mu.Unlock()
	require.True(t, logs.hasLine("level=WARN", "sink unreachable: circuit open", "connection refused"))

	rc := serveWebhook(t, addr, func(*http.Request) int { return http.StatusOK })
	b.waitStats(t, "every event delivered once the endpoint is up", func(s outbox.Stats) bool {
		return s.Processed == int64(len(ids))
	})
	require.Equal(t, len(ids), rc.received())
	require.Zero(t, b.attemptsSpent(t))
	require.Zero(t, b.stats(t).Failed)
	require.Equal(t, outbox.CircuitClosed, r.SinkCircuit())
	require.Equal(t, 1, states.count(outbox.CircuitClosed))
	// One warning per state change: down once, up once; the probes in
	// between log at debug level.
	require.Equal(t, 1, strings.Count(logs.String(), "sink unreachable: circuit open"))
	require.Equal(t, 1, strings.Count(logs.String(), "sink reachable again: circuit closed"))
}

func TestRelaySinkErrorStatusSpendsAttempts(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	addr := closedPort(t)
	// Every event but one is accepted; that one gets a 500 each time. The
	// endpoint answers, so the failure is the event's.
	serveWebhook(t, addr, func(r *http.Request) int {
		if r.Header.Get("ce-subject") == "3" {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	states := &sinkStates{}
	ids := b.write(t, 10, nil)
	b.start(t, outbox.RelayConfig{
		Sink: newWebhookSink(t, addr), MaxAttempts: 3,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		Hooks: []outbox.Hook{states},
	})
	b.waitStats(t, "the failing event dead-lettered, the rest delivered", func(s outbox.Stats) bool {
		return s.Processed == int64(len(ids)-1) && s.Failed == 1
	})
	require.Equal(t, 3, b.attemptsSpent(t), "three attempts spent on the event the endpoint refused")
	require.Zero(t, states.count(outbox.CircuitOpen), "an answering endpoint never opens the circuit")
}

func TestRelaySinkErrorStatusForEveryEventSpendsAttempts(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	addr := closedPort(t)
	serveWebhook(t, addr, func(*http.Request) int { return http.StatusServiceUnavailable })
	states := &sinkStates{}
	ids := b.write(t, 5, nil)
	b.start(t, outbox.RelayConfig{
		Sink: newWebhookSink(t, addr), MaxAttempts: 2,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		Hooks: []outbox.Hook{states},
	})
	b.waitStats(t, "every event dead-lettered", func(s outbox.Stats) bool { return s.Failed == int64(len(ids)) })
	require.Equal(t, 2*len(ids), b.attemptsSpent(t))
	require.Zero(t, states.count(outbox.CircuitOpen), "an HTTP status is an answer: the circuit stays closed")
}

// healthySink is an HTTP sink with a health check that dials its
// endpoint, counting the publishes and the checks.
type healthySink struct {
	*httpSink
	addr      string
	mu        sync.Mutex
	published int
	checks    int
}

func (s *healthySink) Publish(ctx context.Context, events []outbox.Event) []error {
	s.mu.Lock()
	s.published += len(events)
	s.mu.Unlock()
	return s.httpSink.Publish(ctx, events)
}

func (s *healthySink) Health(ctx context.Context) error {
	s.mu.Lock()
	s.checks++
	s.mu.Unlock()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return err
	}
	return c.Close()
}

func (s *healthySink) counts() (published, checks int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.published, s.checks
}

func TestRelayProbesWithTheSinksHealthCheck(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	addr := closedPort(t)
	sink := &healthySink{httpSink: newWebhookSink(t, addr), addr: addr}
	states := &sinkStates{}
	ids := b.write(t, 5, nil)
	b.start(t, outbox.RelayConfig{
		Sink: sink, BatchSize: 5, MaxAttempts: 1,
		ProbeInterval: 10 * time.Millisecond, ProbeIntervalMax: 40 * time.Millisecond,
		Hooks: []outbox.Hook{states},
	})
	testutil.WaitFor(t, 20*time.Second, "five health checks failed", func() bool {
		_, checks := sink.counts()
		return checks >= 5
	})
	published, _ := sink.counts()
	require.Equal(t, len(ids), published, "while the circuit is open the relay publishes nothing: the health check probes")
	require.Zero(t, b.attemptsSpent(t))

	serveWebhook(t, addr, func(*http.Request) int { return http.StatusOK })
	b.waitStats(t, "every event delivered", func(s outbox.Stats) bool { return s.Processed == int64(len(ids)) })
	require.Zero(t, b.attemptsSpent(t))
	require.Equal(t, 1, states.count(outbox.CircuitClosed))
}

func TestRelayDeliveryInTheBatchMeansEventErrorsSpendAttempts(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	// One event is delivered; the others fail with errors marked
	// Unavailable. The sink is evidently reachable, so they spend attempts.
	sink := outbox.SinkFunc(func(_ context.Context, events []outbox.Event) []error {
		errs := outbox.BatchError(len(events), outbox.Unavailable(errors.New("connection reset")))
		errs[0] = nil
		return errs
	})
	states := &sinkStates{}
	b.write(t, 3, nil)
	b.start(t, outbox.RelayConfig{Sink: sink, BatchSize: 3, MaxAttempts: 5, BackoffBase: time.Hour, BackoffMax: time.Hour,
		Hooks: []outbox.Hook{states}})
	b.waitStats(t, "one delivered, two retried", func(s outbox.Stats) bool { return s.Processed == 1 && s.Pending == 2 })
	require.Equal(t, 2, b.attemptsSpent(t))
	require.Zero(t, states.count(outbox.CircuitOpen))
}

func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	base := errors.New("no responders")
	err := fmt.Errorf("natssink: %w", outbox.Unavailable(base))
	require.True(t, outbox.IsUnavailable(err))
	require.ErrorIs(t, err, base)
	require.Equal(t, "natssink: no responders", err.Error())
	require.False(t, outbox.IsUnavailable(base))
	require.False(t, outbox.IsUnavailable(nil))
	require.NoError(t, outbox.Unavailable(nil))
}

func TestRelayClassifiesRefusedDialsItself(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	addr := closedPort(t)
	// A sink that returns the standard library's error as is, unmarked.
	var up atomic.Bool
	sink := outbox.SinkFunc(func(ctx context.Context, events []outbox.Event) []error {
		if up.Load() {
			return nil
		}
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = c.Close()
			err = errors.New("unexpected listener")
		}
		return outbox.BatchError(len(events), fmt.Errorf("mysink: %w", err))
	})
	states := &sinkStates{}
	ids := b.write(t, 5, nil)
	r := b.start(t, outbox.RelayConfig{Sink: sink, MaxAttempts: 1, ProbeInterval: 10 * time.Millisecond,
		ProbeIntervalMax: 20 * time.Millisecond, Hooks: []outbox.Hook{states}})
	testutil.WaitFor(t, 20*time.Second, "three failed probes", func() bool { return states.count(outbox.CircuitOpen) >= 4 })
	require.Zero(t, b.attemptsSpent(t), "a refused dial is recognized without the sink marking it")
	require.Zero(t, b.stats(t).Failed)
	up.Store(true)
	b.waitStats(t, "every event delivered", func(s outbox.Stats) bool { return s.Processed == int64(len(ids)) })
	require.Equal(t, outbox.CircuitClosed, r.SinkCircuit())
}

func TestRelayRestartsWithAClosedCircuit(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	addr := closedPort(t)
	states := &sinkStates{}
	b.write(t, 3, nil)
	r, err := outbox.NewRelay(b.db, outbox.RelayConfig{Schema: b.schema, Sink: newWebhookSink(t, addr),
		PollInterval: 20 * time.Millisecond, ProbeInterval: time.Hour, Hooks: []outbox.Hook{states},
		Logger: (&logBuffer{}).logger()})
	require.NoError(t, err)
	require.NoError(t, r.Start(b.ctx))
	testutil.WaitFor(t, 20*time.Second, "the circuit opened", func() bool { return r.SinkCircuit() == outbox.CircuitOpen })
	require.NoError(t, r.Stop(b.ctx))

	// Started again, the relay does not wait an hour for a probe: it
	// claims, and finds the endpoint up.
	serveWebhook(t, addr, func(*http.Request) int { return http.StatusOK })
	require.NoError(t, r.Start(b.ctx))
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
	require.Equal(t, outbox.CircuitClosed, r.SinkCircuit())
	require.Equal(t, 1, states.count(outbox.CircuitClosed), "the hooks heard of the reset")
	b.waitStats(t, "every event delivered", func(s outbox.Stats) bool { return s.Processed == 3 })
}

func TestRelayEventThatLooksLikeAnOutageDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	// The endpoint drops the connection whenever it gets the poison event,
	// and takes every other event.
	sink := outbox.SinkFunc(func(_ context.Context, events []outbox.Event) []error {
		errs := make([]error, len(events))
		for i, e := range events {
			if e.AggregateID == "poison" {
				errs[i] = outbox.Unavailable(errors.New("connection reset by peer"))
			}
		}
		return errs
	})
	states := &sinkStates{}
	poison := b.write(t, 1, func(_ int, m *outbox.Message) { m.AggregateID = "poison" })[0]
	b.start(t, outbox.RelayConfig{Sink: sink, MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond,
		ProbeInterval: 10 * time.Millisecond, ProbeIntervalMax: 20 * time.Millisecond, Hooks: []outbox.Hook{states}})
	testutil.WaitFor(t, 20*time.Second, "the poison event alone opened the circuit and failed probes", func() bool {
		return states.count(outbox.CircuitOpen) >= 4
	})
	others := b.write(t, 5, nil)
	b.waitStats(t, "the events written after it delivered", func(s outbox.Stats) bool { return s.Processed == int64(len(others)) })
	// Its failure is marked just after the deliveries of its batch.
	testutil.WaitFor(t, 10*time.Second, "the poison event spent an attempt in a batch with deliveries", func() bool {
		e, err := b.mgr.Event(b.ctx, poison)
		require.NoError(t, err)
		return e.Attempts > 0
	})
}
