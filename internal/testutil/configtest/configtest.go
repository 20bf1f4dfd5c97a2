// Package configtest holds the checks the sink packages' configuration
// tests share: that an error is an *outbox.ConfigError naming the right
// field on one line without a secret, that a printed or logged Config hides
// its secrets, and a throwaway certificate for the tls options.
package configtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// RequireError checks that err is an *outbox.ConfigError for field whose
// one-line message holds want and none of secrets.
func RequireError(t testing.TB, err error, field, want string, secrets ...string) {
	t.Helper()
	var ce *outbox.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, field, ce.Field)
	require.ErrorContains(t, err, want)
	for _, s := range secrets {
		require.NotContains(t, err.Error(), s)
	}
	require.NotContains(t, err.Error(), "\n")
}

// Printed returns the ways a Config ends up in text: %v (String), %+v,
// %#v (GoString) and a slog text log line (LogValue).
func Printed(c any) []string {
	var log strings.Builder
	slog.New(slog.NewTextHandler(&log, nil)).Info("sink", "config", c)
	return []string{fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), log.String()}
}

// RequireURLError checks an error of a ConfigFromURL that parses its URL
// with net/url: an *outbox.ConfigError that does not quote the URL's
// password (when net/url finds one of 6 bytes or more; a shorter one may
// well stand in the error for another reason).
func RequireURLError(t testing.TB, raw string, err error) {
	t.Helper()
	var ce *outbox.ConfigError
	require.ErrorAs(t, err, &ce)
	if u, perr := url.Parse(raw); perr == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && len(pw) >= 6 {
			require.NotContains(t, err.Error(), pw, "the password never shows")
		}
	}
}

// RequireHostListError checks an error of a ConfigFromURL for a host-list
// URL (kafka://, nats://): an *outbox.ConfigError on one line that does not
// quote whatever stands between the first : and the last @ of the
// authority, 4 bytes or more.
func RequireHostListError(t testing.TB, raw string, err error) {
	t.Helper()
	var ce *outbox.ConfigError
	if !strings.Contains(err.Error(), "invalid ") {
		t.Fatalf("error is not a ConfigError: %v", err)
	}
	require.ErrorAs(t, err, &ce)
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("multi-line error: %q", err)
	}
	// The password never appears in the error, whatever it is.
	if _, rest, ok := strings.Cut(raw, "://"); ok {
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			if _, pass, ok := strings.Cut(rest[:at], ":"); ok && len(pass) >= 4 && !strings.ContainsAny(pass, "?/#") {
				require.NotContains(t, err.Error(), pass)
			}
		}
	}
}

// WriteCert writes a self-signed CA certificate and its key as PEM files
// in a temporary directory of t.
func WriteCert(t testing.TB) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "outbox-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	return certFile, keyFile
}
