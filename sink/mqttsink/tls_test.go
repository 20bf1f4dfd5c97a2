package mqttsink_test

// The TLS tests run against an Eclipse MQTT broker of their own with a
// TLS listener (the machine's shared one listens in plain TCP): see
// package servers, and its OUTBOX_SKIP_TLS_SERVERS for machines without
// /usr/sbin/mosquitto.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
	servers.SkipIfDisabled(t)
	certs := servers.NewCerts(t)
	conf := filepath.Join(t.TempDir(), "mosquitto.conf")
	srv := servers.Start(t, servers.Spec{
		Name: "the Eclipse MQTT broker", Binary: "/usr/sbin/mosquitto", //nolint:misspell // the broker program's name
		Args: func(port int) []string {
			text := fmt.Sprintf("listener %d 127.0.0.1\ncafile %s\ncertfile %s\nkeyfile %s\nrequire_certificate %t\n"+
				"allow_anonymous true\npersistence false\nlog_dest stderr\n",
				port, certs.CA, certs.ServerCert, certs.ServerKey, requireCert)
			if os.Geteuid() == 0 {
				// Run as root, the broker would switch to an
				// unprivileged user that cannot read the test's files.
				text += "user root\n"
			}
			require.NoError(t, os.WriteFile(conf, []byte(text), 0o600))
			return []string{"-c", conf}
		},
		// A handshake that verifies the test's own CA: the port is ours.
		Ready: servers.TLSReady(certs.ClientTLS(true)),
	})
	return &tlsBroker{addr: srv.Addr, certs: certs}
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
// subscriber over TLS. The URL takes no CA option, so the CA comes in
// Config.TLS.
func TestTLSPublishesEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		requireCert bool
		scheme      string
		tls         func(c *servers.Certs) *tls.Config
	}{
		{"ServerCertificate", false, "mqtts", func(c *servers.Certs) *tls.Config { return c.ClientTLS(false) }},
		{"MutualTLS", true, "mqtts", func(c *servers.Certs) *tls.Config { return c.ClientTLS(true) }},
		{"ServerName", true, "ssl", func(c *servers.Certs) *tls.Config {
			cfg := c.ClientTLS(true)
			cfg.ServerName = "localhost"
			return cfg
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := startTLSBroker(t, tc.requireCert)
			prefix := uniqueTopic(t)
			sub := b.subscribe(t, prefix+"/#")
			cfg, err := mqttsink.ConfigFromURL(tc.scheme + "://relay:" + tlsPassword + "@" + b.addr + "?client_id=outbox-tls-" + brokertest.RandomName())
			require.NoError(t, err)
			cfg.Router = under(t, prefix)
			cfg.TLS = tc.tls(b.certs)
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
// the broker and never quoting the password, when TLS cannot be set up.
func TestTLSRefusalsFailInOneLine(t *testing.T) {
	t.Parallel()
	b := startTLSBroker(t, true)
	c := b.certs
	for _, tc := range []struct {
		name   string
		scheme string
		tls    *tls.Config
		want   []string
	}{
		{"SystemRoots", "mqtts", nil, []string{"certificate signed by unknown authority", "Config.TLS.RootCAs"}},
		{"WrongCA", "mqtts", c.WrongCATLS(true), []string{"certificate signed by unknown authority", "Config.TLS.RootCAs"}},
		{"NoClientCertificate", "mqtts", servers.TLS12(c.ClientTLS(false)), []string{"remote error: tls:", "Config.TLS.Certificates"}},
		// Config.TLS configures mqtts:// only: the broker resets the
		// plain connection.
		{"PlainURL", "mqtt", c.ClientTLS(true), []string{"is the MQTT broker running and reachable?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := mqttsink.Config{
				URL: tc.scheme + "://relay:" + tlsPassword + "@" + b.addr, TLS: tc.tls,
				DialTimeout: 3 * time.Second, Logger: slog.New(slog.DiscardHandler),
			}
			s, err := mqttsink.New(t.Context(), cfg)
			require.Nil(t, s)
			want := append([]string{"mqttsink: connect to mqtt"}, tc.want...)
			brokertest.RequireConnectError(t, err, tlsPassword, want...)
		})
	}
}
