package outbox

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSinkUnavailableClassifiesConnectionErrors(t *testing.T) {
	t.Parallel()
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"marked", fmt.Errorf("amqpsink: %w", Unavailable(errors.New("channel closed"))), true},
		{"refused", fmt.Errorf("post: %w", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNREFUSED)}), true},
		{"dial", fmt.Errorf("post: %w", dial), true},
		{"dns", &net.DNSError{Err: "no such host", Name: "broker.invalid", IsNotFound: true}, true},
		{"tls verify", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, true},
		{"tls alert", &net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")}, true},
		{"unknown authority", x509.UnknownAuthorityError{}, true},
		{"reset after the request: the sink decides", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, false},
		{"timeout", fmt.Errorf("publish: %w", errors.New("context deadline exceeded")), false},
		{"permanent wins", Permanent(Unavailable(errors.New("x"))), false},
		{"plain", errors.New("broker rejected the message"), false},
	}
	for _, c := range cases {
		require.Equal(t, c.want, sinkUnavailable(c.err), c.name)
	}
}

func TestSinkDownNeedsNoDeliveryAndAnUnavailableError(t *testing.T) {
	t.Parallel()
	down := Unavailable(errors.New("connection refused"))
	other := errors.New("rejected")
	require.True(t, sinkDown([]error{down, down}))
	require.True(t, sinkDown([]error{down, other}), "an event's own error in a batch that reached nothing still opens the circuit")
	require.False(t, sinkDown([]error{down, nil}), "a delivery proves the sink reachable")
	require.False(t, sinkDown([]error{other, other}))
	require.False(t, sinkDown(nil))
}
