package amqpsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/route"
)

// confirmWindow is the most messages one channel has unconfirmed at once;
// a larger batch is published in windows of this size. It also sizes each
// channel's buffer of returned messages, so no return is ever dropped.
const confirmWindow = 1000

// Sink publishes events to RabbitMQ (or any AMQP 0-9-1 broker) with
// publisher confirms. It is safe for concurrent use.
type Sink struct {
	cfg      Config
	router   *route.Router
	log      *slog.Logger
	endpoint string // redacted broker URL, for errors and logs

	mu     sync.Mutex
	conn   *amqp.Connection // nil while disconnected
	lost   error            // why conn is nil
	up     chan struct{}    // closed once conn is set; replaced when it is lost
	down   chan struct{}    // closed once conn is marked lost; replaced when it is set
	idle   []*pubChannel    // settled confirm-mode channels, free for a window
	closed bool

	stop chan struct{}  // closed by Close
	wg   sync.WaitGroup // the supervisor and every publishing goroutine
}

var _ outbox.Sink = (*Sink)(nil)

// New connects to the broker and returns a sink for cfg, with defaults
// filled in. It returns an *outbox.ConfigError naming the field when cfg is
// invalid, and a one-line error naming the broker (never the password) when
// the broker cannot be reached. Close the sink when done.
// Dial opens one connection to cfg's broker with the sink's connection
// settings (TLS, heartbeat, dial timeout, connection name), declaring the
// exchange if cfg says so, for a consumer that shares the sink's URL
// conventions (amqpinbox and outbox receive --from amqp:// do). It does not
// reconnect: the caller closes the connection and dials again after a
// loss. Its errors never hold the password.
func Dial(ctx context.Context, cfg Config) (*amqp.Connection, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, endpoint: endpoint(cfg.URL)}
	conn, _, err := s.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("amqpsink: connect to %s: %w", s.endpoint, err)
	}
	return conn, nil
}

func New(ctx context.Context, cfg Config) (*Sink, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	router := cfg.Router
	if router == nil {
		var err error
		if router, err = route.New(""); err != nil {
			return nil, err
		}
	}
	s := &Sink{
		cfg:      cfg,
		router:   router,
		endpoint: endpoint(cfg.URL),
		up:       make(chan struct{}),
		stop:     make(chan struct{}),
	}
	s.log = cfg.Logger.With(slog.String("component", "amqpsink"), slog.String("broker", s.endpoint))
	conn, closes, err := s.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("amqpsink: connect to %s: %w", s.endpoint, err)
	}
	s.conn, s.down = conn, make(chan struct{})
	close(s.up)
	s.wg.Add(1)
	go s.supervise(conn, closes)
	return s, nil
}

// String names the sink and its broker, without credentials.
func (s *Sink) String() string { return "amqpsink(" + s.endpoint + ")" }

// LogValue logs the sink's configuration without credentials.
func (s *Sink) LogValue() slog.Value { return s.cfg.LogValue() }

// Close closes the connection and waits for the sink's goroutines. Publish
// calls still running fail with a retryable error. Close is idempotent.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	conn := s.conn
	s.conn, s.idle = nil, nil
	s.mu.Unlock()
	var err error
	if conn != nil {
		// The deadline also unblocks a publish stuck writing to a broker
		// that stopped reading.
		err = conn.CloseDeadline(closeDeadline())
		if errors.Is(err, amqp.ErrClosed) {
			err = nil
		}
	}
	s.wg.Wait()
	if err != nil {
		return fmt.Errorf("amqpsink: close the connection to %s: %w", s.endpoint, err)
	}
	return nil
}

// Publish publishes each event with the mandatory flag and waits for the
// broker's confirms of the whole batch, and returns one result per event,
// nil when all were confirmed. Messages go out back to back on one channel
// and their confirms are awaited together, so a batch costs about one round
// trip. An event the broker returns as unroutable, nacks, or that was
// unconfirmed when the connection was lost or ctx ended gets a retryable
// error; an event no broker would accept (a routing key longer than 255
// bytes) gets a permanent one.
//
// With outbox.KeyOrdered(ctx), the batch goes in waves (see
// outbox.PublishKeyWaves) with at most one message per aggregate: RabbitMQ
// routes one channel's messages in order, but a message it returns or
// nacks does not stop the ones behind it, so an aggregate's next event is
// published only once the previous one was confirmed. A batch of distinct
// aggregates is a single wave.
func (s *Sink) Publish(ctx context.Context, events []outbox.Event) []error {
	if len(events) == 0 {
		return nil
	}
	errs := make([]error, len(events))
	msgs := make([]message, len(events))
	todo := make([]int, 0, len(events))
	for i := range events {
		m, err := s.newMessage(&events[i])
		if err != nil {
			errs[i] = err
			continue
		}
		msgs[i] = m
		todo = append(todo, i)
	}
	if outbox.KeyOrdered(ctx) {
		outbox.PublishKeyWaves(events, errs, nil, func(wave []int) { s.publishWindows(ctx, events, msgs, wave, errs) })
	} else {
		s.publishWindows(ctx, events, msgs, todo, errs)
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// publishWindows publishes the events at todo in windows of up to
// confirmWindow messages and sets their results.
func (s *Sink) publishWindows(ctx context.Context, events []outbox.Event, msgs []message, todo []int, errs []error) {
	for len(todo) > 0 {
		n := min(len(todo), confirmWindow)
		s.publishWindow(ctx, events, msgs, todo[:n], errs)
		todo = todo[n:]
	}
}

// publishWindow publishes the events at idx and sets their results. The
// work runs on a goroutine of its own because amqp091's I/O ignores
// contexts: a broker that stops reading blocks the publishing goroutine,
// and Publish must still return when ctx ends. That goroutine settles the
// channel (every confirm in, every return read) before handing it to the
// next window, so results never leak from one batch into another.
func (s *Sink) publishWindow(ctx context.Context, events []outbox.Event, msgs []message, idx []int, errs []error) {
	w := &window{msgs: make([]message, len(idx)), ids: make([]int64, len(idx))}
	for j, i := range idx {
		w.msgs[j] = msgs[i]
		w.ids[j] = events[i].ID
	}
	done := make(chan []error, 1)
	if !s.goTracked(func() { done <- s.runWindow(ctx, w) }) {
		for j, i := range idx {
			errs[i] = fmt.Errorf("amqpsink: event %d: not sent: %w", w.ids[j], errSinkClosed)
		}
		return
	}
	select {
	case res := <-done:
		for j, i := range idx {
			errs[i] = res[j]
		}
	case <-ctx.Done():
		down := !s.connected()
		for j, i := range idx {
			errs[i] = fmt.Errorf("amqpsink: event %d: gave up before the broker confirmed it: %w", w.ids[j], context.Cause(ctx))
			if down {
				errs[i] = outbox.Unavailable(errs[i])
			}
		}
	}
}

// connected reports whether the sink holds an open connection.
func (s *Sink) connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn != nil && !s.conn.IsClosed()
}

// Health reports whether the sink is connected to the broker (it
// reconnects in the background); the relay probes with it while the
// sink's circuit is open. It implements outbox.HealthChecker.
func (s *Sink) Health(ctx context.Context) error {
	if _, err := s.connection(ctx); err != nil {
		return outbox.Unavailable(fmt.Errorf("amqpsink: %w", err))
	}
	return nil
}

var _ outbox.HealthChecker = (*Sink)(nil)

var errSinkClosed = errors.New("the sink is closed")

// goTracked runs f on a goroutine that Close waits for, unless the sink is
// closed; it reports whether f runs.
func (s *Sink) goTracked(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Go(f)
	return true
}
