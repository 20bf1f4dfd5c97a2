package servers

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Certs is a test's own small PKI, as PEM files in a temporary directory:
// a CA, a server certificate it signed for 127.0.0.1, ::1 and localhost, a
// client certificate it signed, and a second CA that signed neither (the
// wrong CA). Because every test makes its own, a server that presents the
// test's server certificate is the test's server.
type Certs struct {
	// CA is the CA certificate that signed the server and client
	// certificates.
	CA string
	// ServerCert and ServerKey are the server's certificate and key.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client certificate (CN outbox-relay)
	// and its key, for mutual TLS.
	ClientCert, ClientKey string
	// OtherCA is a CA certificate that signed nothing here: trusting it
	// alone must fail verification of the server.
	OtherCA string

	pool, otherPool *x509.CertPool
	client          tls.Certificate
	server          tls.Certificate
}

// NewCerts writes a fresh PKI into a temporary directory of t.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	c := &Certs{
		CA: path("ca.pem"), ServerCert: path("server.pem"), ServerKey: path("server-key.pem"),
		ClientCert: path("client.pem"), ClientKey: path("client-key.pem"), OtherCA: path("other-ca.pem"),
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		Subject:   pkix.Name{CommonName: "outbox-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	otherTmpl := *caTmpl
	otherTmpl.Subject.CommonName = "outbox-test-other-ca"
	ca, caKey := issue(t, caTmpl, nil, nil, c.CA, "")
	other, _ := issue(t, &otherTmpl, nil, nil, c.OtherCA, "")
	c.server = leaf(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, caKey, c.ServerCert, c.ServerKey)
	c.client = leaf(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "outbox-relay"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey, c.ClientCert, c.ClientKey)
	c.pool = x509.NewCertPool()
	c.pool.AddCert(ca)
	c.otherPool = x509.NewCertPool()
	c.otherPool.AddCert(other)
	return c
}

// Pool holds the CA.
func (c *Certs) Pool() *x509.CertPool { return c.pool }

// ClientTLS is a client configuration that trusts the CA and, with
// withCert, presents the client certificate.
func (c *Certs) ClientTLS(withCert bool) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.pool}
	if withCert {
		cfg.Certificates = []tls.Certificate{c.client}
	}
	return cfg
}

// WrongCATLS is ClientTLS(withCert) trusting only OtherCA, which must
// fail to verify the server.
func (c *Certs) WrongCATLS(withCert bool) *tls.Config {
	cfg := c.ClientTLS(withCert)
	cfg.RootCAs = c.otherPool
	return cfg
}

// ServerTLS is a server configuration with the server certificate that
// verifies client certificates against the CA as auth asks.
func (c *Certs) ServerTLS(auth tls.ClientAuthType) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{c.server}, ClientCAs: c.pool, ClientAuth: auth}
}

// leaf issues a certificate of tmpl signed by ca and returns it as a key
// pair.
func leaf(t testing.TB, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certFile, keyFile string) tls.Certificate {
	t.Helper()
	now := time.Now()
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	issue(t, tmpl, ca, caKey, certFile, keyFile)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	require.NoError(t, err)
	return pair
}

// issue makes a key and a certificate of tmpl signed by parent (self-signed
// when parent is nil) and writes the certificate to certFile and, unless
// keyFile is empty, the key to keyFile in PKCS #8, which Go, OpenSSL and
// Erlang all read.
func issue(t testing.TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	require.NoError(t, err)
	tmpl.SerialNumber = serial
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	if keyFile != "" {
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	}
	return cert, key
}

// TLS12 caps cfg at TLS 1.2 and returns it. A server that refuses the
// client's certificate then says so with an alert during the handshake;
// under TLS 1.3 the client finishes its side first and, depending on
// timing, may see only a reset connection on its first write.
func TLS12(cfg *tls.Config) *tls.Config {
	cfg.MaxVersion = tls.VersionTLS12
	return cfg
}
