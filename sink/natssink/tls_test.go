package natssink_test

// The TLS tests run against a nats-server of their own with a TLS
// listener (the machine's shared one listens in plain TCP): see package
// servers, and its OUTBOX_SKIP_TLS_SERVERS for machines without
// /usr/sbin/nats-server.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/internal/testutil/servers"
	"github.com/outboxkit/outbox/sink/natssink"
)

// tlsPassword is the password of the user relay on the TLS servers; no
// error may quote it.
const tlsPassword = "tls-s3cret-pass"

// tlsServer is a nats-server of the test's own with JetStream, serving
// only TLS with certs' server certificate and requiring the user relay.
type tlsServer struct {
	addr  string
	certs *servers.Certs
}

// startTLSServer starts a nats-server whose listener speaks only TLS; with
// verifyClients it also requires a client certificate signed by the CA.
func startTLSServer(t *testing.T, verifyClients bool) *tlsServer {
	t.Helper()
	servers.SkipIfDisabled(t)
	certs := servers.NewCerts(t)
	name := "outbox-tls-" + brokertest.RandomName()
	storeDir := t.TempDir()
	srv := servers.Start(t, servers.Spec{
		Name: "nats-server", Binary: "/usr/sbin/nats-server",
		Args: func(port int) []string {
			args := []string{
				"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-n", name, "-js", "-sd", storeDir,
				"--user", "relay", "--pass", tlsPassword,
				"--tls", "--tlscert", certs.ServerCert, "--tlskey", certs.ServerKey,
			}
			if verifyClients {
				args = append(args, "--tlsverify", "--tlscacert", certs.CA)
			}
			return args
		},
		Ready: natsReady(name),
	})
	return &tlsServer{addr: srv.Addr, certs: certs}
}

// natsReady is ready once the server named name greets with an INFO line
// that asks for TLS: NATS sends INFO in plain text before the TLS
// handshake, and the name shows that the port is the test's server.
func natsReady(name string) func(ctx context.Context, addr string) error {
	return func(ctx context.Context, addr string) error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		defer conn.Close()
		if dl, ok := ctx.Deadline(); ok {
			_ = conn.SetDeadline(dl)
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.Contains(line, `"server_name":"`+name+`"`) || !strings.Contains(line, `"tls_required":true`) {
			return fmt.Errorf("another server answers: %s", line)
		}
		return nil
	}
}

// url is the sink URL for the server with the query q, which the test
// fills with tls options.
func (s *tlsServer) url(q url.Values) string {
	return "nats://relay:" + tlsPassword + "@" + s.addr + "?" + q.Encode()
}

// reader connects over TLS as a consumer, presenting the client
// certificate, closed when t ends.
func (s *tlsServer) reader(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect("nats://"+s.addr, nats.UserInfo("relay", tlsPassword), nats.Secure(s.certs.ClientTLS(true)))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// TestTLSPublishesEndToEnd publishes through a sink configured from a
// nats:// URL with the tls options to a server that serves only TLS, and
// reads the messages back with a JetStream consumer over TLS.
func TestTLSPublishesEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		verifyClients bool
		query         func(c *servers.Certs) url.Values
	}{
		{"ServerCertificate", false, func(c *servers.Certs) url.Values {
			return url.Values{"tls": {"true"}, "tls_ca": {c.CA}}
		}},
		{"MutualTLS", true, func(c *servers.Certs) url.Values {
			return url.Values{"tls": {"true"}, "tls_ca": {c.CA}, "tls_cert": {c.ClientCert}, "tls_key": {c.ClientKey}}
		}},
		// The server certificate names localhost besides 127.0.0.1.
		{"ServerName", true, func(c *servers.Certs) url.Values {
			return url.Values{"tls_ca": {c.CA}, "tls_cert": {c.ClientCert}, "tls_key": {c.ClientKey}, "tls_server_name": {"localhost"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := startTLSServer(t, tc.verifyClients)
			q := tc.query(srv.certs)
			stream := "TLS_" + strings.ToUpper(brokertest.RandomName())
			q.Set("stream", stream)
			q.Set("create_stream", "true")
			q.Set("stream_subjects", "tls.>")
			q.Set("route", "tls.{event_type}")
			cfg, err := natssink.ConfigFromURL(srv.url(q))
			require.NoError(t, err)
			require.NotNil(t, cfg.TLS)
			cfg.Logger = quiet
			s := newSink(t, cfg)

			events := []outbox.Event{brokertest.FullEvent(1, "x_tenant", "acme"), brokertest.FullEvent(2, "x_tenant", "acme")}
			events[1].EventType = "order.paid"
			require.Nil(t, s.Publish(t.Context(), events))

			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			cons, err := srv.reader(t).OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
			require.NoError(t, err)
			batch, err := cons.Fetch(len(events), jetstream.FetchMaxWait(5*time.Second))
			require.NoError(t, err)
			var got []jetstream.Msg
			for m := range batch.Messages() {
				got = append(got, m)
			}
			require.NoError(t, batch.Error())
			require.Len(t, got, len(events))
			for i, m := range got {
				require.Equal(t, "tls."+events[i].EventType, m.Subject())
				require.Equal(t, strconv.FormatInt(events[i].ID, 10), m.Headers().Get("ce-id"))
				require.Equal(t, "acme", m.Headers().Get("ce-xtenant"))
				require.JSONEq(t, string(events[i].Payload), string(m.Data()))
			}
		})
	}
}

// TestTLSRefusalsFailInOneLine checks that New fails, on one line that
// says why and never quotes the password, when TLS cannot be set up.
func TestTLSRefusalsFailInOneLine(t *testing.T) {
	t.Parallel()
	srv := startTLSServer(t, true)
	c := srv.certs
	for _, tc := range []struct {
		name  string
		query url.Values
		want  []string
	}{
		{"WrongCA", url.Values{"tls_ca": {c.OtherCA}, "tls_cert": {c.ClientCert}, "tls_key": {c.ClientKey}},
			[]string{"cannot connect to nats://" + srv.addr, "certificate signed by unknown authority", "set tls_ca"}},
		{"WrongServerName", url.Values{"tls_ca": {c.CA}, "tls_cert": {c.ClientCert}, "tls_key": {c.ClientKey}, "tls_server_name": {"wrong.example"}},
			[]string{"not wrong.example", "tls_server_name"}},
		{"NoClientCertificate", url.Values{"tls_ca": {c.CA}},
			[]string{"cannot connect to nats://" + srv.addr, "the server ended the TLS handshake", "set tls_cert and tls_key"}},
		// The client turns to TLS by itself when the server asks for it,
		// trusting the system roots.
		{"NoTLS", url.Values{},
			[]string{"cannot connect to nats://" + srv.addr, "certificate signed by unknown authority", "set tls_ca"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := natssink.ConfigFromURL(srv.url(tc.query))
			require.NoError(t, err)
			cfg.Logger = quiet
			cfg.ConnectTimeout = 3 * time.Second
			s, err := natssink.New(t.Context(), cfg)
			require.Nil(t, s)
			brokertest.RequireConnectError(t, err, tlsPassword, tc.want...)
		})
	}
}
