package webhooksink_test

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/internal/testutil/servers"
	"github.com/outboxkit/outbox/sink/webhooksink"
)

// newTLSServer is newServer serving https with the server certificate of
// certs, verifying client certificates as auth asks. It records the
// common name of the client certificate of the last request in clientCN.
func newTLSServer(t *testing.T, certs *servers.Certs, auth tls.ClientAuthType) (srv *server, clientCN *atomic.Value) {
	t.Helper()
	s := &server{}
	clientCN = &atomic.Value{}
	clientCN.Store("")
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			clientCN.Store(r.TLS.PeerCertificates[0].Subject.CommonName)
		}
		s.serveHTTP(w, r)
	}))
	s.TLS = certs.ServerTLS(auth)
	s.StartTLS()
	t.Cleanup(s.Close)
	return s, clientCN
}

// tlsClient is a client with its own transport for tlsCfg.
func tlsClient(t *testing.T, tlsCfg *tls.Config) *http.Client {
	tr := &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// TestTLSDeliversOverHTTPS POSTs signed events over https to a server with
// a certificate of the test's own CA, which the sink trusts through
// Config.TLS (what outbox relay's --webhook-ca sets), or through a
// Config.Client of the caller's.
func TestTLSDeliversOverHTTPS(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		auth     tls.ClientAuthType
		withCert bool
		client   bool // Config.Client rather than Config.TLS
	}{
		{"ServerCertificate", tls.NoClientCert, false, false},
		{"MutualTLS", tls.RequireAndVerifyClientCert, true, false},
		{"ClientServerCertificate", tls.NoClientCert, false, true},
		{"ClientMutualTLS", tls.RequireAndVerifyClientCert, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			certs := servers.NewCerts(t)
			srv, clientCN := newTLSServer(t, certs, tc.auth)
			require.True(t, strings.HasPrefix(srv.URL, "https://"))
			cfg := webhooksink.Config{Secret: testSecret, TLS: certs.ClientTLS(tc.withCert)}
			if tc.client {
				cfg.Client, cfg.TLS = tlsClient(t, cfg.TLS), nil
			}
			s := newSink(t, srv, cfg)

			e := brokertest.FullEvent(7, "x_tenant", "acme")
			require.Nil(t, s.Publish(t.Context(), []outbox.Event{e}))
			r := srv.only(t)
			require.Equal(t, "7", r.Header.Get("ce-id"))
			require.Equal(t, "acme", r.Header.Get("ce-xtenant"))
			require.JSONEq(t, string(e.Payload), string(r.Body))
			wh, err := standardwebhooks.NewWebhook(testSecret)
			require.NoError(t, err)
			require.NoError(t, wh.Verify(r.Body, r.Header), "the signature verifies")
			if tc.withCert {
				require.Equal(t, "outbox-relay", clientCN.Load())
			}
		})
	}
}

// TestTLSFailuresAreRetryableAndSayWhy checks the errors of requests whose
// TLS handshake fails: retryable (the certificate may be fixed), on one
// line, naming the cause and no secret.
func TestTLSFailuresAreRetryableAndSayWhy(t *testing.T) {
	t.Parallel()
	certs := servers.NewCerts(t)
	srv, _ := newTLSServer(t, certs, tls.RequireAndVerifyClientCert)
	for _, tc := range []struct {
		name   string
		client *http.Client
		tls    *tls.Config
		want   []string
	}{
		// The default client trusts the system roots only.
		{"SystemRoots", nil, nil, []string{"certificate signed by unknown authority", "trust the CA", "Config.TLS.RootCAs (outbox relay --webhook-ca)"}},
		{"WrongCA", nil, certs.WrongCATLS(true), []string{"certificate signed by unknown authority", "--webhook-ca"}},
		{"ClientWrongCA", tlsClient(t, certs.WrongCATLS(true)), nil, []string{"certificate signed by unknown authority"}},
		{"NoClientCertificate", nil, servers.TLS12(certs.ClientTLS(false)), []string{"remote error: tls:", "requires a client certificate", "--webhook-cert and --webhook-key"}},
		{"ClientNoClientCertificate", tlsClient(t, servers.TLS12(certs.ClientTLS(false))), nil, []string{"remote error: tls:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := webhooksink.Config{
				URL:     strings.Replace(srv.URL, "https://", "https://user:"+testPassword+"@", 1) + "/hooks/" + testPathTok + "?sig=" + testPathTok,
				Secret:  testSecret,
				Headers: map[string]string{"Authorization": testToken},
				Client:  tc.client,
				TLS:     tc.tls,
			}
			s := newSink(t, srv, cfg)
			errs := s.Publish(t.Context(), []outbox.Event{brokertest.FullEvent(9, "x", "y")})
			require.Len(t, errs, 1)
			require.Error(t, errs[0])
			require.False(t, outbox.IsPermanent(errs[0]), "%v", errs[0])
			require.ErrorContains(t, errs[0], "webhooksink: event 9: POST https://127.0.0.1:")
			for _, w := range tc.want {
				require.ErrorContains(t, errs[0], w)
			}
			require.NotContains(t, errs[0].Error(), "\n")
			requireNoSecrets(t, errs[0].Error())
			require.Empty(t, srv.received(), "no request got through")
		})
	}
}
