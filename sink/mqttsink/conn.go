package mqttsink

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxkit/outbox/internal/backoff"
)

// Reconnect backoff: the first attempt follows a loss almost at once, later
// ones spread out up to reconnectMax.
const (
	reconnectBase = 100 * time.Millisecond
	reconnectMax  = 5 * time.Second
)

// supervise waits for paho to report the connection lost and reconnects
// with backoff, until Close.
func (s *Sink) supervise() {
	defer s.wg.Done()
	for {
		var reason error
		select {
		case <-s.stop:
			return
		case reason = <-s.lostCh:
		}
		s.mu.Lock()
		s.up = make(chan struct{})
		s.lost = fmt.Errorf("the connection was lost: %w", reason)
		s.mu.Unlock()
		s.log.Warn("connection lost; reconnecting", slog.String("error", reason.Error()))
		if !s.reconnect() {
			return
		}
	}
}

// reconnect connects until it succeeds (true) or the sink closes (false).
// An attempt in progress is finished, not abandoned, so Close never races
// paho's connect.
func (s *Sink) reconnect() bool {
	down := time.Now()
	for attempt := 0; ; attempt++ {
		t := time.NewTimer(backoff.Exponential(attempt, reconnectBase, reconnectMax))
		select {
		case <-s.stop:
			t.Stop()
			return false
		case <-t.C:
		}
		if err := s.connect(context.Background()); err != nil {
			s.mu.Lock()
			s.lost = err
			s.mu.Unlock()
			s.log.Debug("reconnect failed", slog.Int("attempt", attempt+1), slog.String("error", err.Error()))
			continue
		}
		s.mu.Lock()
		close(s.up)
		s.lost = nil
		s.mu.Unlock()
		s.log.Info("reconnected", slog.Int("attempts", attempt+1), slog.Duration("down_for", time.Since(down)))
		return true
	}
}

// connected returns once the sink is connected, waiting up to
// ReconnectWait for a lost connection to come back.
func (s *Sink) connected(ctx context.Context) error {
	s.mu.Lock()
	up, closed := s.up, s.closed
	s.mu.Unlock()
	if closed {
		return errSinkClosed
	}
	select {
	case <-up:
		return nil
	default:
	}
	t := time.NewTimer(s.cfg.ReconnectWait)
	defer t.Stop()
	select {
	case <-up:
		return nil
	case <-s.stop:
		return errSinkClosed
	case <-ctx.Done():
		return fmt.Errorf("not connected to %s: %w", s.endpoint, context.Cause(ctx))
	case <-t.C:
		s.mu.Lock()
		lost := s.lost
		s.mu.Unlock()
		return fmt.Errorf("not connected to %s: %w; reconnecting in the background", s.endpoint, lost)
	}
}
