package circuit

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"syscall"
)

// ConnectFailed reports whether err is the standard library's failure to
// reach an endpoint at all, one every request to it would meet: a refused
// or failed dial, a name that does not resolve, or a TLS handshake that
// failed (a certificate not trusted, an alert from the server, a peer that
// does not speak TLS). A connection reset after it was made is not: only
// the caller knows whether it came before an answer.
func ConnectFailed(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var (
		dnsErr    *net.DNSError
		opErr     *net.OpError
		verifyErr *tls.CertificateVerificationError
		headerErr tls.RecordHeaderError
		authErr   x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		certErr   x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &dnsErr), errors.As(err, &verifyErr), errors.As(err, &headerErr),
		errors.As(err, &authErr), errors.As(err, &hostErr), errors.As(err, &certErr):
		return true
	case errors.As(err, &opErr):
		// "remote error" is a TLS alert the server sent during the
		// handshake.
		return opErr.Op == "dial" || opErr.Op == "remote error"
	}
	return false
}
