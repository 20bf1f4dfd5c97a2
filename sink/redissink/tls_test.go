package redissink_test

// The TLS tests run against a redis-server of their own with only a TLS
// port (the machine's shared one listens in plain TCP): see package
// servers, and its OUTBOX_SKIP_TLS_SERVERS for machines without
// /usr/bin/redis-server.

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/url"
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
	certs := servers.NewCerts(t)
	srv := servers.RedisTLS(t, certs, tlsPassword, authClients)
	return &tlsServer{addr: srv.Addr, certs: certs}
}

// url is the rediss:// URL of the server with the password and the query
// q.
func (s *tlsServer) url(q url.Values) string {
	u := "rediss://:" + tlsPassword + "@" + s.addr + "/0"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// entries reads a whole stream back over TLS.
func (s *tlsServer) entries(t *testing.T, stream string) []redis.XMessage {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, Password: tlsPassword, TLSConfig: s.certs.ClientTLS(true)})
	t.Cleanup(func() { _ = rdb.Close() })
	return entries(t, rdb, stream)
}

// TestTLSPublishesEndToEnd appends through a sink for a rediss:// URL to a
// server that serves only TLS, and reads the stream back with XRANGE. The
// CA and client certificate come from the URL's tls options, or from
// Config.TLS.
func TestTLSPublishesEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		authClients string
		query       func(c *servers.Certs) url.Values
		tls         func(c *servers.Certs) *tls.Config // Config.TLS, set after ConfigFromURL
	}{
		{"ServerCertificate", "optional", func(c *servers.Certs) url.Values { return url.Values{"tls_ca": {c.CA}} }, nil},
		{"MutualTLS", "yes", func(c *servers.Certs) url.Values {
			return url.Values{"tls_ca": {c.CA}, "tls_cert": {c.ClientCert}, "tls_key": {c.ClientKey}}
		}, nil},
		// The server certificate names localhost besides 127.0.0.1.
		{"ServerName", "yes", func(c *servers.Certs) url.Values {
			return url.Values{"tls": {"true"}, "tls_ca": {c.CA}, "tls_cert": {c.ClientCert}, "tls_key": {c.ClientKey}, "tls_server_name": {"localhost"}}
		}, nil},
		{"ConfigTLS", "yes", func(*servers.Certs) url.Values { return nil }, func(c *servers.Certs) *tls.Config { return c.ClientTLS(true) }},
		// go-redis's own URL option, without a CA: rediss:// alone would
		// verify against the system roots.
		{"SkipVerifyFromURL", "optional", func(*servers.Certs) url.Values { return url.Values{"skip_verify": {"true"}} }, nil},
		// skip_verify merges with the Config.TLS the tls options make.
		{"SkipVerifyWithClientCertificate", "yes", func(c *servers.Certs) url.Values {
			return url.Values{"skip_verify": {"true"}, "tls_cert": {c.ClientCert}, "tls_key": {c.ClientKey}}
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := startTLSServer(t, tc.authClients)
			stream := brokertest.UniqueName(t, "tls.", ".")
			q := tc.query(srv.certs)
			if q == nil {
				q = url.Values{}
			}
			q.Set("route", stream)
			cfg, err := redissink.ConfigFromURL(srv.url(q))
			require.NoError(t, err)
			for opt := range q {
				if opt != "skip_verify" {
					require.NotContains(t, cfg.URL, opt+"=", "the sink's options leave the URL go-redis parses")
				}
			}
			if tc.tls != nil {
				cfg.TLS = tc.tls(srv.certs)
			}
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

// TestTLSRefusalsFailInOneLine checks that New fails, on one line naming
// the server and the option to set, never quoting the password, when TLS
// cannot be set up.
func TestTLSRefusalsFailInOneLine(t *testing.T) {
	t.Parallel()
	srv := startTLSServer(t, "yes")
	c := srv.certs
	withCert := func(q url.Values) url.Values {
		q.Set("tls_cert", c.ClientCert)
		q.Set("tls_key", c.ClientKey)
		return q
	}
	for _, tc := range []struct {
		name  string
		query url.Values
		tls12 bool // see servers.TLS12
		want  []string
	}{
		{"SystemRoots", withCert(url.Values{}), false, []string{"certificate signed by unknown authority", "set tls_ca", "Config.TLS.RootCAs"}},
		{"WrongCA", withCert(url.Values{"tls_ca": {c.OtherCA}}), false, []string{"certificate signed by unknown authority", "set tls_ca"}},
		{"WrongServerName", withCert(url.Values{"tls_ca": {c.CA}, "tls_server_name": {"wrong.example"}}), false, []string{"not wrong.example", "tls_server_name"}},
		{"NoClientCertificate", url.Values{"tls_ca": {c.CA}}, true, []string{"remote error: tls:", "set tls_cert and tls_key", "Config.TLS.Certificates"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.query.Set("max_retries", "-1") // fail at once, without go-redis's retries
			cfg, err := redissink.ConfigFromURL(srv.url(tc.query))
			require.NoError(t, err)
			if tc.tls12 {
				cfg.TLS = servers.TLS12(cfg.TLS)
			}
			cfg.Logger = slog.New(slog.DiscardHandler)
			s, err := redissink.New(t.Context(), cfg)
			require.Nil(t, s)
			want := append([]string{"redissink: connect to rediss://" + srv.addr + "/0"}, tc.want...)
			brokertest.RequireConnectError(t, err, tlsPassword, want...)
		})
	}
	// Config.TLS configures rediss:// only.
	t.Run("PlainURL", func(t *testing.T) {
		t.Parallel()
		cfg := redissink.Config{URL: "redis://:" + tlsPassword + "@" + srv.addr + "/0?max_retries=-1", TLS: c.ClientTLS(true), Logger: slog.New(slog.DiscardHandler)}
		s, err := redissink.New(t.Context(), cfg)
		require.Nil(t, s)
		brokertest.RequireConnectError(t, err, tlsPassword, "redissink: connect to redis", "use rediss://")
	})
}
