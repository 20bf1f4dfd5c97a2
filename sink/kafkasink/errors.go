package kafkasink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
)

// errNoAck is a record whose ack did not arrive before the Publish context
// ended. The record may still be stored later; consumers drop the
// duplicate its retry then makes by ce_id.
type errNoAck struct{ cause error }

func (e errNoAck) Error() string {
	return "no ack before the produce was abandoned: " + e.cause.Error()
}
func (e errNoAck) Unwrap() error { return e.cause }

// produceError explains why e was not stored, and marks the errors that
// retrying cannot fix as permanent.
func (s *Sink) produceError(ctx context.Context, e *outbox.Event, topic string, err error) error {
	prefix := fmt.Sprintf("kafkasink: event %d to topic %q", e.ID, topic)
	switch {
	case errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge):
		return outbox.Permanent(fmt.Errorf("%s: the record (%d payload bytes plus key and headers) is larger than the producer's or topic's limit (MaxRecordBytes %d, the topic's max.message.bytes): shrink the event or raise both limits: %w",
			prefix, len(e.Payload), s.cfg.MaxRecordBytes, err))
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return outbox.Permanent(fmt.Errorf("%s: the topic does not exist: create it (or set auto_create_topics=true where the brokers allow it) or change the route, then retry the dead-lettered event: %w", prefix, err))
	case errors.Is(err, kerr.InvalidTopicException):
		return outbox.Permanent(fmt.Errorf("%s: the brokers refuse this topic name: change the route: %w", prefix, err))
	case errors.Is(err, kerr.InvalidRecord) || errors.Is(err, kerr.PolicyViolation):
		return outbox.Permanent(fmt.Errorf("%s: the brokers rejected the record: %w", prefix, err))
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return fmt.Errorf("%s: the brokers refuse writes to this topic for this user: grant WRITE on the topic (retryable): %w", prefix, err)
	case errors.Is(err, kgo.ErrClientClosed):
		return fmt.Errorf("%s: the sink is closed (retryable): %w", prefix, err)
	case (errors.Is(err, kgo.ErrRecordTimeout) || ctx.Err() != nil) && s.state.down():
		// The client retries while the brokers are unreachable: the ack
		// waits for them, not for the event.
		return outbox.Unavailable(fmt.Errorf("%s: no ack; the brokers do not answer (retryable): %w", prefix, err))
	case errors.Is(err, kgo.ErrRecordTimeout):
		return fmt.Errorf("%s: no ack within the delivery timeout %v; the brokers may be down (retryable): %w", prefix, s.cfg.DeliveryTimeout, err)
	case ctx.Err() != nil:
		return fmt.Errorf("%s: gave up before the brokers acknowledged (retryable): %w", prefix, err)
	}
	return fmt.Errorf("%s (retryable): %w", prefix, err)
}

// batchLevel reports whether the brokers answer err for a whole record
// batch (a produce request's records of one partition) although one record
// may be at fault: a record over the topic's max.message.bytes fails every
// record batched with it.
func batchLevel(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidRecord) || errors.Is(err, kerr.CorruptMessage) || errors.Is(err, kerr.PolicyViolation)
}

// refusal is a batch-level refusal of one topic partition's records.
type refusal struct {
	topic     string
	partition int32
	code      int16
}

// refusalOf is r's refusal; the zero refusal for any other failure.
func refusalOf(r result, topics []string) refusal {
	var ke *kerr.Error
	if !batchLevel(r.err) || !errors.As(r.err, &ke) {
		return refusal{}
	}
	return refusal{topics[r.i], r.partition, ke.Code}
}

// batchRefusals counts the failures of this Publish per batch-level
// refusal. A refusal that several records share does not prove that any
// one of them is at fault, so none of them is dead-lettered for it: retries
// spread the events over other batches until the one at fault fails alone.
func batchRefusals(failed []result, topics []string) map[refusal]int {
	n := map[refusal]int{}
	for _, r := range failed {
		if k := refusalOf(r, topics); k != (refusal{}) {
			n[k]++
		}
	}
	return n
}

// connectError explains in one line why no broker answered New's ping.
func (s *Sink) connectError(err error) error {
	hint := "check that Kafka is running there and reachable from here"
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.IllegalSaslState):
		hint = "the brokers refused the credentials: check the user name, password and sasl mechanism"
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		hint = "the brokers do not offer this SASL mechanism: choose another sasl option"
	case errors.As(err, new(*tls.CertificateVerificationError)):
		hint = "a broker's TLS certificate does not verify: set tls_ca to the CA that signed it (and tls_server_name if the certificate names another host)"
	case tlsRefused(err):
		hint = "a broker ended the TLS handshake: if it requires a client certificate, set tls_cert and tls_key to one signed by a CA it trusts"
	case errors.Is(err, io.EOF) && s.cfg.SASL != "":
		hint = "a broker closed the connection during the handshake: check the user name, password and sasl mechanism, and whether the brokers expect TLS"
	case errors.Is(err, io.EOF):
		hint = "a broker closed the connection during the handshake: check whether the brokers expect TLS or SASL"
	case errors.Is(err, context.DeadlineExceeded):
		hint = fmt.Sprintf("no broker answered within %v; check that Kafka is running there, reachable from here, and speaks TLS only if the tls option is set", s.cfg.ConnectTimeout)
	}
	return fmt.Errorf("kafkasink: cannot reach a broker of %s: %s; %s", s.brokers, s.scrub(err.Error()), hint)
}

// tlsRefused reports whether a broker ended the TLS handshake with an
// alert, as one that requires a client certificate does.
func tlsRefused(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}
