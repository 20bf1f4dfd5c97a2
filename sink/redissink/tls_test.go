package redissink_test

// The TLS tests run against a redis-server of their own with only a TLS
// port (the machine's shared one listens in plain TCP): see package
// servers, and its OUTBOX_SKIP_TLS_SERVERS for machines without
// /usr/bin/redis-server.

import (
	"context"
	"crypto/tls"
	"log/slog"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/internal/testutil/servers"
	"github.com/outboxkit/outbox/sink/redissink"
)

// tlsPassword is the TLS servers' requirepass; no error may quote it.
const tlsPassword = "tls-s3cret-pass"

// tlsServer is a redis-server of the test's own that serves only TLS.
type tlsServer struct {
	addr  string
	certs *servers.Certs
}

// startTLSServer starts a redis-server with a TLS port and no plain one;
// authClients is its tls-auth-clients: optional or yes (a client
// certificate signed by the CA is required).
func startTLSServer(t *testing.T, authClients string) *tlsServer {
	t.Helper()
	servers.SkipIfDisabled(t)
	certs := servers.NewCerts(t)
	dir := t.TempDir()
	srv := servers.Start(t, servers.Spec{
		Name: "redis-server", Binary: "/usr/bin/redis-server",
		Args: func(port int) []string {
			return []string{
				"--port", "0", "--bind", "127.0.0.1", "--tls-port", strconv.Itoa(port),
				"--tls-cert-file", certs.ServerCert, "--tls-key-file", certs.ServerKey,
				"--tls-ca-cert-file", certs.CA, "--tls-auth-clients", authClients,
				"--requirepass", tlsPassword, "--dir", dir, "--save", "", "--appendonly", "no",
			}
		},
		// A handshake that verifies the test's own CA: the port is ours.
		Ready: servers.TLSReady(certs.ClientTLS(true)),
	})
	return &tlsServer{addr: srv.Addr, certs: certs}
}

// url is the rediss:// URL of the server with the password and query.
func (s *tlsServer) url(query string) string {
	return "rediss://:" + tlsPassword + "@" + s.addr + "/0" + query
}

// entries reads a whole stream back over TLS.
func (s *tlsServer) entries(t *testing.T, stream string) []redis.XMessage {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, Password: tlsPassword, TLSConfig: s.certs.ClientTLS(true)})
	t.Cleanup(func() { _ = rdb.Close() })
	return entries(t, rdb, stream)
}

// TestTLSPublishesEndToEnd appends through a sink for a rediss:// URL to a
// server that serves only TLS, and reads the stream back with XRANGE.
// redis.ParseURL reads no CA option from the URL, so the CA comes in
// Config.TLS.
func TestTLSPublishesEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		authClients string
		tls         func(c *servers.Certs) *tls.Config
		query       string
	}{
		{"ServerCertificate", "optional", func(c *servers.Certs) *tls.Config { return c.ClientTLS(false) }, ""},
		{"MutualTLS", "yes", func(c *servers.Certs) *tls.Config { return c.ClientTLS(true) }, ""},
		{"ServerName", "yes", func(c *servers.Certs) *tls.Config {
			cfg := c.ClientTLS(true)
			cfg.ServerName = "localhost"
			return cfg
		}, ""},
		// go-redis's own URL option, without Config.TLS: rediss:// alone
		// would verify against the system roots.
		{"SkipVerifyFromURL", "optional", func(*servers.Certs) *tls.Config { return nil }, "?skip_verify=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := startTLSServer(t, tc.authClients)
			stream := brokertest.UniqueName(t, "tls.", ".")
			cfg, err := redissink.ConfigFromURL(srv.url(tc.query + sep(tc.query) + "route=" + stream))
			require.NoError(t, err)
			cfg.TLS = tc.tls(srv.certs)
			cfg.Logger = slog.New(slog.DiscardHandler)
			s := brokertest.Open(t, func(ctx context.Context) (*redissink.Sink, error) { return redissink.New(ctx, cfg) })

			events := []outbox.Event{brokertest.FullEvent(1, "x_tenant", "acme"), brokertest.FullEvent(2, "x_tenant", "acme")}
			require.Nil(t, s.Publish(t.Context(), events))
			got := srv.entries(t, stream)
			require.Len(t, got, len(events))
			for i, m := range got {
				require.Equal(t, strconv.FormatInt(events[i].ID, 10), m.Values["id"])
				require.Equal(t, "acme", m.Values["xtenant"])
				require.Equal(t, string(events[i].Payload), m.Values["data"])
			}
		})
	}
}

// sep is the separator before one more query option after query.
func sep(query string) string {
	if query == "" {
		return "?"
	}
	return "&"
}

// noRetries makes a failing connect fail at once, without go-redis's
// retries and their backoff.
const noRetries = "?max_retries=-1"

// TestTLSRefusalsFailInOneLine checks that New fails, on one line naming
// the server and never quoting the password, when TLS cannot be set up.
func TestTLSRefusalsFailInOneLine(t *testing.T) {
	t.Parallel()
	srv := startTLSServer(t, "yes")
	c := srv.certs
	for _, tc := range []struct {
		name string
		url  string
		tls  *tls.Config
		want []string
	}{
		{"SystemRoots", srv.url(noRetries), nil, []string{"certificate signed by unknown authority", "Config.TLS.RootCAs"}},
		{"WrongCA", srv.url(noRetries), c.WrongCATLS(true), []string{"certificate signed by unknown authority", "Config.TLS.RootCAs"}},
		{"NoClientCertificate", srv.url(noRetries), servers.TLS12(c.ClientTLS(false)), []string{"remote error: tls:", "Config.TLS.Certificates"}},
		// Config.TLS configures rediss:// only.
		{"PlainURL", "redis://:" + tlsPassword + "@" + srv.addr + "/0" + noRetries, c.ClientTLS(true), []string{"use rediss://"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := redissink.Config{URL: tc.url, TLS: tc.tls, Logger: slog.New(slog.DiscardHandler)}
			s, err := redissink.New(t.Context(), cfg)
			require.Nil(t, s)
			want := append([]string{"redissink: connect to redis"}, tc.want...)
			brokertest.RequireConnectError(t, err, tlsPassword, want...)
		})
	}
}
