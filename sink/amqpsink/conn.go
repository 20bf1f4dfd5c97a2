package amqpsink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/internal/backoff"
)

// Reconnect backoff: the first attempt follows a loss almost at once, later
// ones spread out up to reconnectMax.
const (
	reconnectBase = 100 * time.Millisecond
	reconnectMax  = 5 * time.Second
	closeTimeout  = 5 * time.Second
)

func closeDeadline() time.Time { return time.Now().Add(closeTimeout) }

// dial connects, declares the exchange if configured, and returns the
// connection with its close notifications.
func (s *Sink) dial(ctx context.Context) (*amqp.Connection, chan *amqp.Error, error) {
	var stopWatch func() bool
	cfg := amqp.Config{
		Heartbeat:  s.cfg.Heartbeat,
		Properties: amqp.NewConnectionProperties(),
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: s.cfg.DialTimeout}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The deadline bounds the TLS and AMQP handshakes, which take
			// no context; amqp091 clears it once the connection is open.
			_ = conn.SetDeadline(time.Now().Add(s.cfg.DialTimeout))
			stopWatch = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
			return conn, nil
		},
	}
	cfg.Properties.SetClientConnectionName(s.cfg.ConnectionName)
	if s.cfg.TLS != nil {
		// amqp091 sets ServerName on the config it is given.
		cfg.TLSClientConfig = s.cfg.TLS.Clone()
	}
	conn, err := amqp.DialConfig(s.cfg.URL, cfg)
	if stopWatch != nil {
		stopWatch()
	}
	if err != nil {
		return nil, nil, connectError(ctx, err)
	}
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	if s.cfg.DeclareExchange {
		if err := s.declareExchange(conn); err != nil {
			_ = conn.CloseDeadline(closeDeadline())
			return nil, nil, err
		}
	}
	return conn, closes, nil
}

// connectError explains a failed connection attempt. Callers prefix it
// with the broker's name.
func connectError(ctx context.Context, err error) error {
	var ae *amqp.Error
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("gave up: %w", context.Cause(ctx))
	case errors.Is(err, amqp.ErrCredentials) || errors.As(err, &ae) && ae.Code == amqp.AccessRefused:
		return fmt.Errorf("the broker refused the login (or dropped the connection during it): check the user and password in the URL: %w", err)
	case errors.Is(err, amqp.ErrVhost) || errors.As(err, &ae) && ae.Code == amqp.NotAllowed:
		return fmt.Errorf("the broker refused the vhost: create it or grant the user access: %w", err)
	case errors.As(err, new(*tls.CertificateVerificationError)):
		return fmt.Errorf("%w (set cacertfile, or Config.TLS, to the CA that signed the broker's certificate, and server_name_indication if the certificate names another host)", err)
	// A TLS alert, as from a broker that requires a client certificate:
	// during the handshake, or (TLS 1.3) on the first read after it, where
	// amqp091 keeps only the error's text.
	case tlsRefused(err) || errors.As(err, &ae) && ae.Code == amqp.FrameError && strings.HasPrefix(ae.Reason, "remote error: tls:"):
		return fmt.Errorf("the broker ended the TLS handshake (%s): if it requires a client certificate, set certfile and keyfile (or Config.TLS) to one signed by a CA it trusts", tlsReason(err))
	case errors.As(err, &ae) && ae.Code == amqp.FrameError:
		return fmt.Errorf("the connection closed during the handshake (%s): is RabbitMQ up and serving AMQP 0-9-1 on that port?", ae.Reason)
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("%w (is RabbitMQ running and reachable?)", err)
	}
	return err
}

// tlsRefused reports whether the broker ended the TLS handshake with an
// alert.
func tlsRefused(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}

// tlsReason is the text of the TLS alert of err.
func tlsReason(err error) string {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return ae.Reason
	}
	return err.Error()
}

// declareExchange declares the configured exchange on a short-lived channel.
func (s *Sink) declareExchange(conn *amqp.Connection) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open a channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	if err := ch.ExchangeDeclare(s.cfg.Exchange, s.cfg.ExchangeType, true, false, false, false, nil); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
			return fmt.Errorf("declare exchange %q as a durable %s exchange: it exists with other settings: "+
				"set the exchange type to match it, or drop the declare option: %w", s.cfg.Exchange, s.cfg.ExchangeType, err)
		}
		return fmt.Errorf("declare exchange %q: %w", s.cfg.Exchange, err)
	}
	return nil
}

// supervise waits for the connection to close and reconnects with
// backoff, until Close.
func (s *Sink) supervise(conn *amqp.Connection, closes chan *amqp.Error) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Cancels a dial in progress when the sink closes; ends with it.
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		var reason *amqp.Error
		select {
		case <-s.stop:
			return
		case reason = <-closes:
		}
		if !s.markLost(conn, reason) {
			return
		}
		if conn, closes = s.reconnect(ctx); conn == nil {
			return
		}
	}
}

// markLost forgets conn after it closed; it reports false when the sink
// was closed.
func (s *Sink) markLost(conn *amqp.Connection, reason *amqp.Error) bool {
	var err error = amqp.ErrClosed
	if reason != nil {
		err = reason
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.conn == conn {
		s.conn, s.idle = nil, nil
		s.lost = fmt.Errorf("the connection was lost: %w", err)
		s.up = make(chan struct{})
		close(s.down)
	}
	s.log.Warn("connection lost; reconnecting", slog.String("error", err.Error()))
	return true
}

// reconnect dials until it succeeds or the sink closes (then it returns
// nil).
func (s *Sink) reconnect(ctx context.Context) (*amqp.Connection, chan *amqp.Error) {
	down := time.Now()
	for attempt := 0; ; attempt++ {
		t := time.NewTimer(backoff.Exponential(attempt, reconnectBase, reconnectMax))
		select {
		case <-s.stop:
			t.Stop()
			return nil, nil
		case <-t.C:
		}
		conn, closes, err := s.dial(ctx)
		if err != nil {
			s.mu.Lock()
			s.lost = err
			s.mu.Unlock()
			s.log.Debug("reconnect failed", slog.Int("attempt", attempt+1), slog.String("error", err.Error()))
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = conn.CloseDeadline(closeDeadline())
			return nil, nil
		}
		s.conn, s.lost, s.down = conn, nil, make(chan struct{})
		close(s.up)
		s.mu.Unlock()
		s.log.Info("reconnected", slog.Int("attempts", attempt+1), slog.Duration("down_for", time.Since(down)))
		return conn, closes
	}
}

// connection returns the open connection, waiting up to ReconnectWait for
// a lost one to come back.
func (s *Sink) connection(ctx context.Context) (*amqp.Connection, error) {
	var timeout <-chan time.Time
	for {
		s.mu.Lock()
		conn, up, down, lost, closed := s.conn, s.up, s.down, s.lost, s.closed
		s.mu.Unlock()
		switch {
		case closed:
			return nil, errSinkClosed
		case conn != nil && conn.IsClosed():
			// Lost a moment ago: the close notification that starts the
			// reconnect is on its way. Wait for the supervisor to mark it
			// lost (up is still the old connection's), then for the new
			// one.
			up = down
			lost = fmt.Errorf("the connection was lost")
		case conn != nil:
			return conn, nil
		}
		if timeout == nil {
			t := time.NewTimer(s.cfg.ReconnectWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-up:
		case <-s.stop:
			return nil, errSinkClosed
		case <-ctx.Done():
			return nil, fmt.Errorf("not connected to %s: %w", s.endpoint, context.Cause(ctx))
		case <-timeout:
			return nil, fmt.Errorf("not connected to %s: %w; reconnecting in the background", s.endpoint, lost)
		}
	}
}

// pubChannel is a confirm-mode channel with its notifications.
type pubChannel struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
}

// acquire takes a settled channel of the open connection, or opens one.
func (s *Sink) acquire(ctx context.Context) (*pubChannel, error) {
	conn, err := s.connection(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	for len(s.idle) > 0 {
		pc := s.idle[len(s.idle)-1]
		s.idle = s.idle[:len(s.idle)-1]
		if pc.conn == conn && !pc.ch.IsClosed() {
			s.mu.Unlock()
			return pc, nil
		}
	}
	s.mu.Unlock()
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open a channel on %s: %w", s.endpoint, err)
	}
	pc := &pubChannel{
		conn:    conn,
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, confirmWindow)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("put a channel on %s in confirm mode: %w", s.endpoint, err)
	}
	return pc, nil
}

// release hands a settled channel to the next window.
func (s *Sink) release(pc *pubChannel) {
	s.mu.Lock()
	keep := !s.closed && s.conn == pc.conn && !pc.ch.IsClosed()
	if keep {
		s.idle = append(s.idle, pc)
	}
	s.mu.Unlock()
	if !keep {
		_ = pc.ch.Close()
	}
}
