package mqttsink_test

// The TLS tests run against an Eclipse MQTT broker of their own with a
// TLS listener (the machine's shared one listens in plain TCP): see
// package servers, and its OUTBOX_SKIP_TLS_SERVERS for machines without
// /usr/sbin/mosquitto.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/internal/testutil/servers"
	"github.com/outboxkit/outbox/sink/mqttsink"
)

// tlsPassword is the password the sinks log in with; no error may quote
// it. The broker allows anonymous clients, so it takes any.
const tlsPassword = "tls-s3cret-pass"

// tlsBroker is an Eclipse MQTT broker of the test's own that serves only
// TLS.
type tlsBroker struct {
	addr  string
	certs *servers.Certs
}

// startTLSBroker starts a broker whose one listener speaks only TLS;
// with requireCert it requires a client certificate signed by the CA.
func startTLSBroker(t *testing.T, requireCert bool) *tlsBroker {
	t.Helper()
	certs := servers.NewCerts(t)
	srv := servers.MQTTBrokerTLS(t, certs, requireCert)
	return &tlsBroker{addr: srv.Addr, certs: certs}
}

// url is the sink URL of the broker with scheme, the password and the
// query q.
func (b *tlsBroker) url(scheme string, q url.Values) string {
	u := scheme + "://relay:" + tlsPassword + "@" + b.addr
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// tlsSubscriber collects the id attribute of every message on a topic
// filter, subscribed over TLS with the client certificate.
type tlsSubscriber struct {
	mu  sync.Mutex
	ids []string
}

func (b *tlsBroker) subscribe(t *testing.T, filter string) *tlsSubscriber {
	t.Helper()
	sub := &tlsSubscriber{}
	opts := mqtt.NewClientOptions().AddBroker("ssl://" + b.addr).SetClientID("outbox-tls-sub-" + brokertest.RandomName()).
		SetTLSConfig(b.certs.ClientTLS(true)).SetCleanSession(true).SetAutoReconnect(false)
	c := mqtt.NewClient(opts)
	tok := c.Connect()
	require.True(t, tok.WaitTimeout(10*time.Second), "connect the subscriber")
	require.NoError(t, tok.Error())
	t.Cleanup(func() { c.Disconnect(100) })
	tok = c.Subscribe(filter, 1, func(_ mqtt.Client, m mqtt.Message) {
		var e struct{ ID string }
		_ = json.Unmarshal(m.Payload(), &e)
		sub.mu.Lock()
		sub.ids = append(sub.ids, e.ID)
		sub.mu.Unlock()
	})
	require.True(t, tok.WaitTimeout(10*time.Second), "subscribe")
	require.NoError(t, tok.Error())
	return sub
}

func (s *tlsSubscriber) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ids...)
}

// TestTLSPublishesEndToEnd publishes through a sink for an mqtts:// URL to
// a broker that serves only TLS, and receives the messages with a
// subscriber over TLS. The CA and client certificate come from the URL's
// tls options, or from Config.TLS.
func TestTLSPublishesEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		requireCert bool
		scheme      string
		query       func(c *servers.Certs) url.Values
		tls         func(c *servers.Certs) *tls.Config // Config.TLS, set after ConfigFromURL
	}{
		{"ServerCertificate", false, "mqtts", func(c *servers.Certs) url.Values { return url.Values{"tls_ca": {c.CA}} }, nil},
		{"MutualTLS", true, "mqtts", func(c *servers.Certs) url.Values {
			return url.Values{"tls_ca": {c.CA}, "tls_cert": {c.ClientCert}, "tls_key": {c.ClientKey}}
		}, nil},
		// The broker certificate names localhost besides 127.0.0.1.
		{"ServerName", true, "ssl", func(c *servers.Certs) url.Values {
			return url.Values{"tls": {"true"}, "tls_ca": {c.CA}, "tls_cert": {c.ClientCert}, "tls_key": {c.ClientKey}, "tls_server_name": {"localhost"}}
		}, nil},
		{"ConfigTLS", true, "mqtts", func(*servers.Certs) url.Values { return url.Values{} }, func(c *servers.Certs) *tls.Config { return c.ClientTLS(true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := startTLSBroker(t, tc.requireCert)
			prefix := uniqueTopic(t)
			sub := b.subscribe(t, prefix+"/#")
			q := tc.query(b.certs)
			q.Set("client_id", "outbox-tls-"+brokertest.RandomName())
			cfg, err := mqttsink.ConfigFromURL(b.url(tc.scheme, q))
			require.NoError(t, err)
			require.Equal(t, tc.scheme+"://relay:"+tlsPassword+"@"+b.addr, cfg.URL, "the options leave the URL")
			cfg.Router = under(t, prefix)
			if tc.tls != nil {
				cfg.TLS = tc.tls(b.certs)
			}
			cfg.Logger = slog.New(slog.DiscardHandler)
			s := brokertest.Open(t, func(ctx context.Context) (*mqttsink.Sink, error) { return mqttsink.New(ctx, cfg) })

			events := []outbox.Event{brokertest.FullEvent(1, "x_tenant", "acme"), brokertest.FullEvent(2, "x_tenant", "acme")}
			require.Nil(t, s.Publish(t.Context(), events))
			testutil.WaitFor(t, 5*time.Second, "both messages", func() bool { return len(sub.received()) == len(events) })
			require.ElementsMatch(t, []string{strconv.FormatInt(events[0].ID, 10), strconv.FormatInt(events[1].ID, 10)}, sub.received())
		})
	}
}

// TestTLSRefusalsFailInOneLine checks that New fails, on one line naming
// the broker and the option to set, never quoting the password, when TLS
// cannot be set up.
func TestTLSRefusalsFailInOneLine(t *testing.T) {
	t.Parallel()
	b := startTLSBroker(t, true)
	c := b.certs
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
			cfg, err := mqttsink.ConfigFromURL(b.url("mqtts", tc.query))
			require.NoError(t, err)
			if tc.tls12 {
				cfg.TLS = servers.TLS12(cfg.TLS)
			}
			cfg.DialTimeout, cfg.Logger = 3*time.Second, slog.New(slog.DiscardHandler)
			s, err := mqttsink.New(t.Context(), cfg)
			require.Nil(t, s)
			want := append([]string{"mqttsink: connect to mqtts://" + b.addr}, tc.want...)
			brokertest.RequireConnectError(t, err, tlsPassword, want...)
		})
	}
	// Config.TLS configures mqtts:// only: the broker resets the plain
	// connection.
	t.Run("PlainURL", func(t *testing.T) {
		t.Parallel()
		cfg := mqttsink.Config{
			URL: b.url("mqtt", nil), TLS: c.ClientTLS(true),
			DialTimeout: 3 * time.Second, Logger: slog.New(slog.DiscardHandler),
		}
		s, err := mqttsink.New(t.Context(), cfg)
		require.Nil(t, s)
		brokertest.RequireConnectError(t, err, tlsPassword, "mqttsink: connect to mqtt", "is the MQTT broker running and reachable?")
	})
}
