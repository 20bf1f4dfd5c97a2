package amqpsink

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox"
)

// window is up to confirmWindow messages published on one channel.
type window struct {
	msgs []message
	ids  []int64 // event IDs, for errors
}

// runWindow publishes w on one channel, waits for every confirm and reads
// every return, and then releases the channel. Returns come before their
// confirm (RabbitMQ sends basic.return ahead of basic.ack), and amqp091
// hands both over from one reader goroutine in that order, so once every
// confirm is in, this window's returns are in the channel's buffer.
func (s *Sink) runWindow(ctx context.Context, w *window) []error {
	errs := make([]error, len(w.msgs))
	pc, err := s.acquire(ctx)
	if err != nil {
		for j := range errs {
			errs[j] = fmt.Errorf("amqpsink: event %d: not sent: %w", w.ids[j], err)
			if !errors.Is(err, errSinkClosed) {
				// No connection, or no channel on it: every event meets it.
				errs[j] = outbox.Unavailable(errs[j])
			}
		}
		return errs
	}
	dcs := make([]*amqp.DeferredConfirmation, len(w.msgs))
	var stopped error
	for j := range w.msgs {
		if ctx.Err() != nil {
			stopped = context.Cause(ctx)
			break
		}
		m := &w.msgs[j]
		dc, err := pc.ch.PublishWithDeferredConfirm(s.cfg.Exchange, m.key, true, false, m.pub)
		if err != nil {
			stopped = err
			break
		}
		dcs[j] = dc
	}
	// Not bounded by ctx: every confirm arrives, or the channel closes and
	// amqp091 nacks what is left. The channel is reusable only then.
	for _, dc := range dcs {
		if dc != nil {
			<-dc.Done()
		}
	}
	returned := make(map[string]amqp.Return)
drain:
	for {
		select {
		case r, ok := <-pc.returns:
			if !ok {
				break drain
			}
			returned[r.MessageId] = r
		default:
			break drain
		}
	}
	var reason *amqp.Error
	select {
	case reason = <-pc.closes:
	default:
	}
	for j := range w.msgs {
		m, dc := &w.msgs[j], dcs[j]
		switch r, isReturned := returned[m.pub.MessageId]; {
		case dc == nil:
			errs[j] = s.notSentError(w.ids[j], stopped, pc, reason)
		case !dc.Acked():
			errs[j] = s.unconfirmedError(w.ids[j], pc, reason)
		case isReturned:
			rerr := &ReturnError{EventID: w.ids[j], Exchange: r.Exchange, RoutingKey: r.RoutingKey, Code: int(r.ReplyCode), Text: r.ReplyText}
			if s.cfg.UnroutablePermanent {
				errs[j] = outbox.Permanent(rerr)
			} else {
				errs[j] = rerr
			}
		}
	}
	s.release(pc)
	return errs
}

// notSentError explains an event the window did not get to publish.
func (s *Sink) notSentError(id int64, stopped error, pc *pubChannel, reason *amqp.Error) error {
	if errors.Is(stopped, amqp.ErrClosed) {
		return s.unconfirmedError(id, pc, reason)
	}
	return fmt.Errorf("amqpsink: event %d: not sent: %w", id, stopped)
}

// unconfirmedError explains a nack or a confirm lost with the channel.
// All of these are retryable.
func (s *Sink) unconfirmedError(id int64, pc *pubChannel, reason *amqp.Error) error {
	switch {
	case pc.conn.IsClosed():
		return outbox.Unavailable(fmt.Errorf("amqpsink: event %d: the connection to %s was lost before the broker confirmed it", id, s.endpoint))
	case reason != nil && reason.Code == amqp.NotFound && s.cfg.Exchange != "":
		return fmt.Errorf("amqpsink: event %d: exchange %q does not exist on %s: declare it, or enable the sink's declare_exchange option: %w",
			id, s.cfg.Exchange, s.endpoint, reason)
	case reason != nil:
		return fmt.Errorf("amqpsink: event %d: the broker closed the channel before confirming it: %w", id, reason)
	case pc.ch.IsClosed():
		return fmt.Errorf("amqpsink: event %d: the channel closed before the broker confirmed it", id)
	}
	return fmt.Errorf("amqpsink: event %d: the broker nacked it (it could not take the message, such as on an internal error)", id)
}

// ReturnError is an event the broker returned because no queue was bound
// for its routing key (it was published with the mandatory flag). The sink
// returns it as is, a retryable error, unless Config.UnroutablePermanent
// wraps it with outbox.Permanent; find it with errors.As.
type ReturnError struct {
	EventID    int64
	Exchange   string
	RoutingKey string
	Code       int    // the AMQP reply code, 312 NO_ROUTE for an unroutable message
	Text       string // the broker's reply text
}

// Error names the event, the exchange and routing key, and how to give the
// message a queue.
func (e *ReturnError) Error() string {
	exchange := "the default exchange"
	hint := "declare a queue with that name"
	if e.Exchange != "" {
		exchange = fmt.Sprintf("exchange %q", e.Exchange)
		hint = "bind a queue to the exchange for that key (or give the exchange an alternate exchange)"
	}
	return fmt.Sprintf("amqpsink: event %d: the broker returned it as unroutable (%d %s): %s has no queue for routing key %q; %s",
		e.EventID, e.Code, e.Text, exchange, e.RoutingKey, hint)
}
