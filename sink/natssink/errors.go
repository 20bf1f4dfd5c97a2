package natssink

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
)

// ErrNoStream is the (permanent) error of an event published to a subject
// that no JetStream stream stores. Find it with errors.Is.
var ErrNoStream = errors.New("no JetStream stream stores this subject")

// errNoAck is a publish whose ack did not arrive before the Publish context
// ended.
type errNoAck struct{ cause error }

func (e errNoAck) Error() string {
	return "no ack before the publish was abandoned: " + e.cause.Error()
}
func (e errNoAck) Unwrap() error { return e.cause }

// publishError explains why e was not stored, and marks the errors that
// retrying cannot fix as permanent.
func (s *Sink) publishError(ctx context.Context, e *outbox.Event, subject string, err error) error {
	prefix := fmt.Sprintf("natssink: event %d to %q", e.ID, subject)
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return outbox.Permanent(fmt.Errorf("%s: %w (no responders): add the subject to a stream (nats stream add, or natssink Config.CreateStream with StreamSubjects) or change the route, then retry the dead-lettered event: %w",
			prefix, ErrNoStream, err))
	case errors.Is(err, nats.ErrMaxPayload):
		return outbox.Permanent(fmt.Errorf("%s: the message (%d payload bytes plus headers) is larger than the server's max_payload of %d bytes: shrink the event or raise max_payload: %w",
			prefix, len(e.Payload), s.nc.MaxPayload(), err))
	case errors.Is(err, nats.ErrBadSubject) || errors.Is(err, nats.ErrBadHeaderMsg):
		return outbox.Permanent(fmt.Errorf("%s: the client refused the message: %w", prefix, err))
	case errors.As(err, &apiErr) && apiErr.Code >= 400 && apiErr.Code < 500 && apiErr.Code != 408 && apiErr.Code != 429:
		// A 4xx answer judges the message, not the server's state: a
		// message over the stream's max_msg_size, a stream other than the
		// expected one.
		return outbox.Permanent(fmt.Errorf("%s: JetStream rejected the message (error code %d): %w", prefix, apiErr.ErrorCode, err))
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		return fmt.Errorf("%s: no ack from JetStream within %v (retryable): %w", prefix, s.cfg.AckTimeout, err)
	case s.nc.IsClosed():
		return outbox.Unavailable(fmt.Errorf("%s: the sink is closed (retryable): %w", prefix, nats.ErrConnectionClosed))
	case errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrConnectionClosed) ||
		(errors.Is(err, nats.ErrNoResponders) && !s.nc.IsConnected()):
		return outbox.Unavailable(fmt.Errorf("%s: the connection to NATS is down and the client is reconnecting (retryable): %w", prefix, err))
	case ctx.Err() != nil && !s.nc.IsConnected():
		// The client buffers publishes while it reconnects, so an outage
		// shows as acks that never come: the connection's, not the event's.
		return outbox.Unavailable(fmt.Errorf("%s: the connection to NATS is down and the client is reconnecting; no ack (retryable): %w", prefix, err))
	case ctx.Err() != nil:
		return fmt.Errorf("%s: gave up before JetStream acknowledged (retryable): %w", prefix, err)
	}
	return fmt.Errorf("%s: %s (retryable)", prefix, s.scrub(err.Error()))
}
