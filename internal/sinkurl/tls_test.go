package sinkurl

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil/configtest"
	"github.com/outboxkit/outbox/internal/testutil/servers"
)

func TestTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile := configtest.WriteCert(t)
	for query, check := range map[string]func(t *testing.T, o *Options){
		"": func(t *testing.T, o *Options) {
			c, err := TLS(o)
			require.NoError(t, err)
			require.Nil(t, c)
		},
		"tls=false": func(t *testing.T, o *Options) {
			c, err := TLS(o)
			require.NoError(t, err)
			require.Nil(t, c)
		},
		"tls=true&tls_server_name=broker.example.com": func(t *testing.T, o *Options) {
			c, err := TLS(o)
			require.NoError(t, err)
			require.Equal(t, "broker.example.com", c.ServerName)
			require.Nil(t, c.RootCAs, "the system pool")
			require.Empty(t, c.Certificates)
		},
		"tls_ca=" + certFile + "&tls_cert=" + certFile + "&tls_key=" + keyFile: func(t *testing.T, o *Options) {
			c, err := TLS(o)
			require.NoError(t, err)
			require.NotNil(t, c, "tls_ options imply TLS")
			require.NotNil(t, c.RootCAs)
			require.Len(t, c.Certificates, 1)
		},
	} {
		t.Run(query, func(t *testing.T) {
			t.Parallel()
			check(t, options(t, query))
		})
	}
}

// badFiles are files that are not what the tls options want.
type badFiles struct {
	noPEM, keyPath string // text that is no PEM; a key whose path no error may quote
	certs          *servers.Certs
}

func newBadFiles(t *testing.T) badFiles {
	dir := t.TempDir()
	f := badFiles{noPEM: filepath.Join(dir, "empty.pem"), keyPath: filepath.Join(dir, "secret-key-dir", "client-key.pem"), certs: servers.NewCerts(t)}
	require.NoError(t, os.WriteFile(f.noPEM, []byte("not a certificate"), 0o600))
	return f
}

func TestTLSErrors(t *testing.T) {
	t.Parallel()
	f := newBadFiles(t)
	c := f.certs
	for _, tc := range []struct{ query, field, text string }{
		{"tls=yes", "URL option tls", `is "yes": use true or false`},
		{"tls=false&tls_ca=/x", "URL option tls", "is false but other tls_ options are set: drop tls=false"},
		{"tls_ca=/nonexistent/ca.pem", "URL option tls_ca", "cannot read the CA file: open /nonexistent/ca.pem: no such file or directory: check the path"},
		{"tls_ca=" + f.noPEM, "URL option tls_ca", f.noPEM + " holds no PEM certificate: point it at the CA's certificate"},
		{"tls_ca=" + c.ClientKey, "URL option tls_ca", "holds no PEM certificate"},
		{"tls_cert=/x.pem", "URL option tls_cert", "is set without tls_key: tls_cert and tls_key go together"},
		{"tls_key=/x.pem", "URL option tls_key", "is set without tls_cert: tls_cert and tls_key go together"},
		{"tls_cert=/nonexistent/c.pem&tls_key=" + c.ClientKey, "URL option tls_cert", "cannot read the client certificate: open /nonexistent/c.pem"},
		{"tls_cert=" + f.noPEM + "&tls_key=" + c.ClientKey, "URL option tls_cert", "holds no PEM certificate: point it at the client certificate"},
		{"tls_cert=" + c.ClientKey + "&tls_key=" + c.ClientKey, "URL option tls_cert", "holds no PEM certificate"},
		{"tls_cert=" + c.ClientCert + "&tls_key=" + f.keyPath, "URL option tls_key", "cannot read the key file: no such file or directory: check the path"},
		{"tls_cert=" + c.ClientCert + "&tls_key=" + c.ClientCert, "URL option tls_key", "holds no PEM private key: point it at the key of tls_cert"},
		{"tls_cert=" + c.ClientCert + "&tls_key=" + c.ServerKey, "URL option tls_key", "does not make a key pair with tls_cert (tls: private key does not match public key)"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			t.Parallel()
			cfg, err := TLS(options(t, tc.query))
			require.Nil(t, cfg)
			configtest.RequireError(t, err, tc.field, tc.text, f.keyPath, c.ServerKey)
		})
	}
}

// TestTLSFilesNames checks that errors name the settings as TLSNames says,
// as the command line's flags do.
func TestTLSFilesNames(t *testing.T) {
	t.Parallel()
	f := newBadFiles(t)
	names := TLSNames{CA: "--ca", Cert: "--cert", Key: "--key", Field: func(name string) string { return name }}
	for _, tc := range []struct {
		files       TLSFiles
		field, text string
	}{
		{TLSFiles{CA: f.noPEM}, "--ca", "holds no PEM certificate"},
		{TLSFiles{Cert: f.certs.ClientCert}, "--cert", "is set without --key: --cert and --key go together"},
		{TLSFiles{Key: f.keyPath}, "--key", "is set without --cert"},
		{TLSFiles{Cert: f.certs.ClientCert, Key: f.certs.ClientCert}, "--key", "point it at the key of --cert"},
	} {
		cfg, err := tc.files.Load(names)
		require.Nil(t, cfg)
		configtest.RequireError(t, err, tc.field, tc.text, f.keyPath)
	}
	cfg, err := TLSFiles{CA: f.certs.CA, Cert: f.certs.ClientCert, Key: f.certs.ClientKey, ServerName: "localhost"}.Load(names)
	require.NoError(t, err)
	require.Equal(t, "localhost", cfg.ServerName)
	require.True(t, cfg.RootCAs.Equal(f.certs.Pool()), "trusts the CA alone")
	require.Len(t, cfg.Certificates, 1)
}

func TestSchemeTLS(t *testing.T) {
	t.Parallel()
	c := servers.NewCerts(t)
	const name = "redis://h:6379/0"
	scheme := func(query string, secure bool) (bool, error) {
		cfg, err := SchemeTLS(options(t, query), name, secure, "rediss", "redis")
		return cfg != nil, err
	}
	for _, tc := range []struct {
		query   string
		secure  bool
		wantTLS bool
	}{
		{"", false, false},
		{"", true, false}, // the scheme's own defaults
		{"tls=false", false, false},
		{"tls=true", true, true},
		{"tls_ca=" + c.CA, true, true},
		{"tls_cert=" + c.ClientCert + "&tls_key=" + c.ClientKey + "&tls_server_name=localhost", true, true},
	} {
		got, err := scheme(tc.query, tc.secure)
		require.NoError(t, err, tc.query)
		require.Equal(t, tc.wantTLS, got, tc.query)
	}
	for _, tc := range []struct {
		query       string
		secure      bool
		field, text string
	}{
		{"tls=maybe", true, "URL option tls", `is "maybe"`},
		{"tls=maybe", false, "URL option tls", `is "maybe"`},
		{"tls=false", true, "URL option tls", "is false but " + name + " is a TLS URL: use redis:// for a plain connection"},
		{"tls=false&tls_ca=" + c.CA, true, "URL option tls", "is false but"},
		{"tls", false, "URL option tls", "is for TLS but " + name + " is a plain connection: use rediss:// for TLS"},
		{"tls_ca=" + c.CA, false, "URL option tls_ca", "is a plain connection: use rediss://"},
		{"tls_cert=" + c.ClientCert + "&tls_key=" + c.ClientKey, false, "URL option tls_cert", "use rediss://"},
		{"tls_server_name=x", false, "URL option tls_server_name", "use rediss://"},
		{"tls_ca=/nonexistent", true, "URL option tls_ca", "cannot read the CA file"},
	} {
		got, err := scheme(tc.query, tc.secure)
		require.False(t, got, tc.query)
		configtest.RequireError(t, err, tc.field, tc.text)
	}
}
