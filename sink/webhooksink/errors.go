package webhooksink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/circuit"
	"github.com/outboxkit/outbox/internal/egress"
	"github.com/outboxkit/outbox/internal/sinkurl"
)

// BodySnippetMax is the most bytes of a response body quoted in an error.
const BodySnippetMax = 200

// drainMax bounds how much of a response body is read and discarded so the
// connection can be reused; a larger body costs a new connection instead.
const drainMax = 64 << 10

// StatusError is an endpoint's answer other than 2xx. The sink returns it
// wrapped with outbox.Permanent for redirects and for 4xx answers other
// than 408 and 429; find it with errors.As.
type StatusError struct {
	EventID    int64
	StatusCode int
	// Body is the start of the response body, at most BodySnippetMax
	// bytes, with whitespace collapsed and configured secrets cut out.
	Body string
	// Location is the redirect target of a 3xx answer, redacted like the
	// endpoint.
	Location string

	endpoint string // redacted
}

// Error names the event, the redacted endpoint and the status, with what to
// change for the statuses that have a usual cause.
func (e *StatusError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "webhooksink: event %d: POST %s answered %d %s", e.EventID, e.endpoint, e.StatusCode, http.StatusText(e.StatusCode))
	switch {
	case e.StatusCode >= 300 && e.StatusCode < 400:
		if e.Location != "" {
			b.WriteString(" to " + e.Location)
		}
		b.WriteString(": redirects are not followed; set the webhook URL to the final URL")
	case e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden:
		b.WriteString(": the endpoint refused the credentials; check the webhook secret and headers, then retry the dead-lettered event")
	case Retryable(e.StatusCode):
		b.WriteString(" (retryable)")
	default:
		b.WriteString(": the endpoint rejected the event; fix the endpoint or the event, then retry the dead-lettered event")
	}
	if e.Body != "" {
		b.WriteString("; response: " + e.Body)
	}
	return b.String()
}

// Retryable reports whether an answer with status code is worth retrying:
// 408 Request Timeout, 429 Too Many Requests, any 5xx, and codes outside
// the ranges HTTP defines. 2xx answers are not errors at all.
func Retryable(code int) bool {
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests:
		return true
	case code >= 300 && code < 500:
		return false
	}
	return true
}

// statusError turns a non-2xx answer into the event's error and consumes
// the body.
func (s *Sink) statusError(e *outbox.Event, resp *http.Response) error {
	se := &StatusError{
		EventID:    e.ID,
		StatusCode: resp.StatusCode,
		Body:       s.redactSecrets(readSnippet(resp.Body)),
		endpoint:   s.endpoint,
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		if u, err := s.url.Parse(loc); err == nil {
			se.Location = redactURL(u)
		}
	}
	if Retryable(resp.StatusCode) {
		return se
	}
	return outbox.Permanent(se)
}

// transportError explains a request that got no answer. All of these are
// retryable; those that every request would meet (see unreachable) are
// marked with outbox.Unavailable, so the relay spends no attempt on them.
func (s *Sink) transportError(ctx context.Context, e *outbox.Event, err error) error {
	err2 := s.describeTransportError(ctx, e, err)
	if ctx.Err() == nil && unreachable(err) {
		return outbox.Unavailable(err2)
	}
	return err2
}

// unreachable reports whether a request failed before any answer for a
// reason that is the endpoint's, not the event's: the dial failed (refused,
// no route, a name that does not resolve), the TLS handshake failed, or the
// connection was reset or closed before a response.
func unreachable(err error) bool {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return false // a slow answer may be the event's
	case errors.Is(err, egress.ErrDenied):
		return false // permanent: the guard refuses the address
	}
	return circuit.ConnectFailed(err) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func (s *Sink) describeTransportError(ctx context.Context, e *outbox.Event, err error) error {
	// client.Do wraps errors in *url.Error, which quotes the full URL
	// (its path and query may hold tokens): keep only the cause.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	prefix := fmt.Sprintf("webhooksink: event %d: POST %s", e.ID, s.endpoint)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: gave up before the endpoint answered: %w", prefix, context.Cause(ctx))
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: no answer within %v: %w; raise the webhook timeout if the endpoint is slow", prefix, s.cfg.Timeout, err)
	case errors.As(err, new(*tls.CertificateVerificationError)):
		return fmt.Errorf("%s: %w; trust the CA that signed the endpoint's certificate with Config.TLS.RootCAs (outbox relay --webhook-ca)", prefix, err)
	case errors.Is(err, egress.ErrDenied):
		// Retrying reaches the same address: dead-letter with the reason.
		return outbox.Permanent(fmt.Errorf("%s: %w; the sink denies private networks (Config.DenyPrivateNetworks): if the endpoint is meant to be internal, allow its network with Config.AllowNetworks (outbox relay --webhook-allow-network)", prefix, err))
	case tlsRefused(err):
		return fmt.Errorf("%s: %w; the endpoint ended the TLS handshake: if it requires a client certificate, set one signed by a CA it trusts in Config.TLS.Certificates (outbox relay --webhook-cert and --webhook-key)", prefix, err)
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// tlsRefused reports whether the endpoint ended the TLS handshake with an
// alert, as one that requires a client certificate does.
func tlsRefused(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}

// readSnippet reads the start of a response body for an error message,
// drains a bounded rest so the connection can be reused, and closes it.
func readSnippet(body io.ReadCloser) string {
	defer drainClose(body)
	buf := make([]byte, BodySnippetMax+1)
	n, _ := io.ReadFull(body, buf)
	truncated := n > BodySnippetMax
	buf = buf[:min(n, BodySnippetMax)]
	if truncated {
		buf = trimPartialRune(buf)
	}
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(buf), "\uFFFD")), " ")
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, s)
	if truncated {
		s += "…"
	}
	return s
}

// trimPartialRune drops an incomplete UTF-8 sequence from the end of b,
// left there by cutting a body at BodySnippetMax bytes.
func trimPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// drainClose reads up to drainMax of body and closes it.
func drainClose(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, drainMax)
	_ = body.Close()
}

// redactSecrets cuts the secret and static header values out of s: an
// endpoint may echo the request back in an error page.
func (s *Sink) redactSecrets(text string) string { return sinkurl.Scrub(text, s.secrets...) }
