package amqpsink_test

// The TLS test runs against a RabbitMQ node of its own with only a TLS
// listener (the machine's shared broker listens in plain TCP): see package
// servers, and its OUTBOX_SKIP_TLS_SERVERS for machines without RabbitMQ.
// A node takes some seconds to boot, so one node serves every case.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/internal/testutil/servers"
	"github.com/outboxkit/outbox/sink/amqpsink"
)

// tlsPassword is the password of the node's user relay; no error may quote
// it.
const tlsPassword = "tls-s3cret-pass"

// epmdAddr is where the Erlang port mapper listens. A node started without
// one would start one that outlives the test.
const epmdAddr = "127.0.0.1:4369"

// tlsNode is a RabbitMQ node of the test's own.
type tlsNode struct {
	addr  string
	certs *servers.Certs
}

// startTLSNode boots a RabbitMQ node whose only listener speaks TLS and
// requires a client certificate signed by the CA, with the user relay.
func startTLSNode(t *testing.T) *tlsNode {
	t.Helper()
	servers.SkipIfDisabled(t)
	bin := servers.Binary(t, "rabbitmq-server", "/usr/lib/rabbitmq/bin/rabbitmq-server")
	var d net.Dialer
	conn, err := d.DialContext(t.Context(), "tcp", epmdAddr)
	if err != nil {
		t.Fatalf("epmd, the Erlang port mapper, does not answer on %s (%v): it runs along the machine's RabbitMQ; start that, or epmd -daemon, or set %s=1", epmdAddr, err, servers.SkipEnv)
	}
	_ = conn.Close()

	certs := servers.NewCerts(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "rabbitmq.conf")
	plugins := filepath.Join(dir, "enabled_plugins")
	require.NoError(t, os.WriteFile(plugins, []byte("[].\n"), 0o600))
	srv := servers.Start(t, servers.Spec{
		Name: "rabbitmq-server", Binary: bin,
		Args: func(port int) []string {
			text := fmt.Sprintf("listeners.tcp = none\nlisteners.ssl.default = 127.0.0.1:%d\n"+
				"ssl_options.cacertfile = %s\nssl_options.certfile = %s\nssl_options.keyfile = %s\n"+
				"ssl_options.verify = verify_peer\nssl_options.fail_if_no_peer_cert = true\n"+
				"default_user = relay\ndefault_pass = %s\n",
				port, certs.CA, certs.ServerCert, certs.ServerKey, tlsPassword)
			require.NoError(t, os.WriteFile(conf, []byte(text), 0o600))
			return nil
		},
		Env: []string{
			"HOME=" + dir, // the Erlang cookie goes here
			"RABBITMQ_NODENAME=outbox-tls-" + brokertest.RandomName() + "@localhost",
			"RABBITMQ_DIST_PORT=" + strconv.Itoa(servers.FreePort(t)),
			"RABBITMQ_CONFIG_FILE=" + conf,
			"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(dir, "rabbitmq-env.conf"), // none: not the machine's
			"RABBITMQ_ADVANCED_CONFIG_FILE=" + filepath.Join(dir, "advanced.config"),
			"RABBITMQ_ENABLED_PLUGINS_FILE=" + plugins,
			"RABBITMQ_MNESIA_BASE=" + filepath.Join(dir, "mnesia"),
			"RABBITMQ_LOG_BASE=" + filepath.Join(dir, "log"),
			"RABBITMQ_LOGS=-",
			"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		},
		// A handshake that verifies the test's own CA: the port is ours.
		Ready:        servers.TLSReady(certs.ClientTLS(true)),
		ReadyTimeout: time.Minute,
	})
	return &tlsNode{addr: srv.Addr, certs: certs}
}

// url is the node's amqps:// URL with the query q.
func (n *tlsNode) url(scheme string, q url.Values) string {
	u := url.URL{Scheme: scheme, User: url.UserPassword("relay", tlsPassword), Host: n.addr, Path: "/", RawQuery: q.Encode()}
	return u.String()
}

// queue declares a queue of the test's own and returns its name and the
// messages it delivers, consumed over TLS.
func (n *tlsNode) queue(t *testing.T) (string, <-chan amqp.Delivery) {
	t.Helper()
	conn, err := amqp.DialTLS(n.url("amqps", nil), n.certs.ClientTLS(true))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	name := uniqueName(t)
	_, err = ch.QueueDeclare(name, false, true, false, false, nil)
	require.NoError(t, err)
	deliveries, err := ch.Consume(name, "", true, false, false, false, nil)
	require.NoError(t, err)
	return name, deliveries
}

// TestTLSAgainstANodeOfItsOwn publishes through sinks for amqps:// URLs to
// a node that serves only TLS and requires client certificates, reading
// the messages back over TLS, and checks that New refuses, on one line
// without the password, what the node does not accept.
func TestTLSAgainstANodeOfItsOwn(t *testing.T) {
	t.Parallel()
	n := startTLSNode(t)
	c := n.certs

	for _, tc := range []struct {
		name  string
		query url.Values
		tls   bool // Config.TLS instead of the URL's options
	}{
		{"URLOptions", url.Values{"cacertfile": {c.CA}, "certfile": {c.ClientCert}, "keyfile": {c.ClientKey}}, false},
		{"ServerNameIndication", url.Values{"cacertfile": {c.CA}, "certfile": {c.ClientCert}, "keyfile": {c.ClientKey}, "server_name_indication": {"localhost"}}, false},
		{"ConfigTLS", url.Values{}, true},
	} {
		t.Run("Publish/"+tc.name, func(t *testing.T) {
			t.Parallel()
			queue, deliveries := n.queue(t)
			q := tc.query
			q.Set("route", queue)
			cfg, err := amqpsink.ConfigFromURL(n.url("amqps", q))
			require.NoError(t, err)
			if tc.tls {
				cfg.TLS = c.ClientTLS(true)
			}
			cfg.Logger = slog.New(slog.DiscardHandler)
			s := brokertest.Open(t, func(ctx context.Context) (*amqpsink.Sink, error) { return amqpsink.New(ctx, cfg) })

			events := []outbox.Event{brokertest.FullEvent(1, "x_tenant", "acme"), brokertest.FullEvent(2, "x_tenant", "acme")}
			require.Nil(t, s.Publish(t.Context(), events))
			timeout := time.After(10 * time.Second)
			for _, e := range events {
				select {
				case d := <-deliveries:
					require.Equal(t, strconv.FormatInt(e.ID, 10), d.MessageId)
					require.Equal(t, "acme", d.Headers["cloudEvents_xtenant"])
					require.JSONEq(t, string(e.Payload), string(d.Body))
				case <-timeout:
					t.Fatalf("event %d did not arrive", e.ID)
				}
			}
		})
	}

	for _, tc := range []struct {
		name   string
		scheme string
		query  url.Values
		want   string
	}{
		{"SystemRoots", "amqps", url.Values{}, "certificate signed by unknown authority (set cacertfile"},
		{"WrongCA", "amqps", url.Values{"cacertfile": {c.OtherCA}, "certfile": {c.ClientCert}, "keyfile": {c.ClientKey}}, "certificate signed by unknown authority (set cacertfile"},
		{"WrongServerName", "amqps", url.Values{"cacertfile": {c.CA}, "certfile": {c.ClientCert}, "keyfile": {c.ClientKey}, "server_name_indication": {"wrong.example"}}, "not wrong.example"},
		// Config.TLS, to cap TLS at 1.2 (see servers.TLS12).
		{"NoClientCertificate", "amqps", nil, "the broker ended the TLS handshake (remote error: tls:"},
		{"PlainURL", "amqp", url.Values{}, "is RabbitMQ up and serving AMQP 0-9-1 on that port?"},
	} {
		t.Run("Refuse/"+tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := amqpsink.ConfigFromURL(n.url(tc.scheme, tc.query))
			require.NoError(t, err)
			if tc.query == nil {
				cfg.TLS = servers.TLS12(c.ClientTLS(false))
			}
			cfg.Logger = slog.New(slog.DiscardHandler)
			cfg.DialTimeout = 5 * time.Second
			s, err := amqpsink.New(t.Context(), cfg)
			require.Nil(t, s)
			brokertest.RequireConnectError(t, err, tlsPassword, "amqpsink: ", tc.want)
		})
	}
}
