package main_test

// The TLS tests of the relay command run against servers of their own
// with TLS listeners and a throwaway CA (package servers; set
// OUTBOX_SKIP_TLS_SERVERS=1 on machines without redis-server and the
// Eclipse MQTT broker).

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/servers"
)

// tlsPassword is the password of the relays' TLS servers; no output may
// quote it.
const tlsPassword = "TlsServerPassw0rd"

// relayTLSFiles is a throwaway PKI, with the client key copied under a
// directory whose name no output may quote, and a file that holds no PEM.
type relayTLSFiles struct {
	*servers.Certs
	key     string // ClientKey's copy
	keyDir  string
	noPEM   string
	missing string // a path in keyDir that does not exist
}

func newRelayTLSFiles(t *testing.T) relayTLSFiles {
	t.Helper()
	f := relayTLSFiles{Certs: servers.NewCerts(t), keyDir: filepath.Join(t.TempDir(), "private-keydir-"+randomName())}
	require.NoError(t, os.Mkdir(f.keyDir, 0o700))
	key, err := os.ReadFile(f.ClientKey)
	require.NoError(t, err)
	f.key, f.missing, f.noPEM = filepath.Join(f.keyDir, "relay-key.pem"), filepath.Join(f.keyDir, "gone.pem"), filepath.Join(t.TempDir(), "not-pem.txt")
	require.NoError(t, os.WriteFile(f.key, key, 0o600))
	require.NoError(t, os.WriteFile(f.noPEM, []byte("not a certificate\n"), 0o600))
	return f
}

// clientQuery is the tls options of a sink URL that trust the CA and
// present the client certificate.
func (f relayTLSFiles) clientQuery() url.Values {
	return url.Values{"tls_ca": {f.CA}, "tls_cert": {f.ClientCert}, "tls_key": {f.key}}
}

// requireQuiet checks that out quotes neither the password nor the key's
// directory.
func (f relayTLSFiles) requireQuiet(t *testing.T, out string) {
	t.Helper()
	require.NotContains(t, out, tlsPassword)
	require.NotContains(t, out, f.keyDir)
}

// TestRelayTLSBrokerSinks relays over TLS to a Redis server and an MQTT
// broker that require a client certificate signed by a private CA, all
// given in the --sink URL's tls options.
func TestRelayTLSBrokerSinks(t *testing.T) {
	t.Parallel()
	t.Run("rediss", func(t *testing.T) {
		t.Parallel()
		b, f := setup(t), newRelayTLSFiles(t)
		srv := servers.RedisTLS(t, f.Certs, tlsPassword, "yes")
		ids := b.writeOrders(t, 3)
		stream := "outbox-cli-tls-" + randomName()
		sink := "rediss://:" + tlsPassword + "@" + srv.Addr + "/0?" + f.clientQuery().Encode()
		f.requireQuiet(t, b.relayUntilProcessed(t, len(ids), tlsPassword, "--sink", sink, "--route", stream))

		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: tlsPassword, TLSConfig: f.ClientTLS(true)})
		t.Cleanup(func() { _ = rdb.Close() })
		entries, err := rdb.XRange(b.ctx, stream, "-", "+").Result()
		require.NoError(t, err)
		var got []received
		for _, e := range entries {
			id, err := strconv.ParseInt(fmt.Sprint(e.Values["id"]), 10, 64)
			require.NoError(t, err, "id field")
			got = append(got, received{id: id, eventType: fmt.Sprint(e.Values["type"]),
				correlationID: fmt.Sprint(e.Values["correlationid"]), payload: json.RawMessage(fmt.Sprint(e.Values["data"]))})
		}
		b.requireDelivered(t, ids, got)
	})
	t.Run("mqtts", func(t *testing.T) {
		t.Parallel()
		b, f := setup(t), newRelayTLSFiles(t)
		srv := servers.MQTTBrokerTLS(t, f.Certs, true)
		prefix := "outbox-cli-tls-" + randomName()
		var (
			mu  sync.Mutex
			got []received
		)
		sub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("ssl://" + srv.Addr).SetClientID("cli-tls-sub-" + randomName()).
			SetTLSConfig(f.ClientTLS(true)).SetCleanSession(true).SetAutoReconnect(false))
		tok := sub.Connect()
		require.True(t, tok.WaitTimeout(10*time.Second), "connect the subscriber")
		require.NoError(t, tok.Error())
		t.Cleanup(func() { sub.Disconnect(100) })
		tok = sub.Subscribe(prefix+"/#", 1, func(_ mqtt.Client, m mqtt.Message) {
			var ce struct {
				ID, Type, CorrelationID string
				Data                    json.RawMessage
			}
			_ = json.Unmarshal(m.Payload(), &ce)
			id, _ := strconv.ParseInt(ce.ID, 10, 64)
			mu.Lock()
			defer mu.Unlock()
			got = append(got, received{id: id, eventType: ce.Type, correlationID: ce.CorrelationID, payload: ce.Data})
		})
		require.True(t, tok.WaitTimeout(10*time.Second), "subscribe")
		require.NoError(t, tok.Error())
		ids := b.writeOrders(t, 3)

		q := f.clientQuery()
		q.Set("client_id", "cli-tls-relay-"+randomName())
		sink := "mqtts://relay:" + tlsPassword + "@" + srv.Addr + "?" + q.Encode()
		f.requireQuiet(t, b.relayUntilProcessed(t, len(ids), tlsPassword, "--sink", sink, "--route", prefix+"/{event_type}"))

		testutil.WaitFor(t, 10*time.Second, "every message received", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) >= len(ids)
		})
		mu.Lock()
		defer mu.Unlock()
		b.requireDelivered(t, ids, got)
	})
}

// tlsWebhook is an https endpoint with the server certificate of certs
// that requires a client certificate signed by the CA, and counts the
// events it receives.
type tlsWebhook struct {
	*httptest.Server
	mu  sync.Mutex
	ids map[string]int
}

func newTLSWebhook(t *testing.T, certs *servers.Certs) *tlsWebhook {
	t.Helper()
	s := &tlsWebhook{ids: map[string]int{}}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.ids[r.Header.Get("ce-id")]++
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	s.TLS = certs.ServerTLS(tls.RequireAndVerifyClientCert)
	// A refused handshake is the point of some tests, not news.
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (s *tlsWebhook) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// TestRelayTLSWebhook relays to an https endpoint that requires a client
// certificate signed by a private CA, with the files given in the config
// file (a flag would do the same).
func TestRelayTLSWebhook(t *testing.T) {
	t.Parallel()
	b, f := setup(t), newRelayTLSFiles(t)
	srv := newTLSWebhook(t, f.Certs)
	ids := b.writeOrders(t, 3)
	config := configFile(t, fmt.Sprintf("sink:\n  url: %s/hook?token=%s\n  webhook_ca: %s\n  webhook_cert: %s\n  webhook_key: %s\n",
		srv.URL, tlsPassword, f.CA, f.ClientCert, f.key))
	f.requireQuiet(t, b.relayUntilProcessed(t, len(ids), tlsPassword, "--config", config))
	require.Equal(t, len(ids), srv.count())
}

// TestRelayTLSWithoutTheCA checks that a relay that does not trust the
// private CA says so and which option fixes it: a broker sink exits 1 when
// it starts; a webhook's relay opens the sink's circuit with the error in
// its warning, and spends no attempt.
func TestRelayTLSWithoutTheCA(t *testing.T) {
	t.Parallel()
	t.Run("rediss", func(t *testing.T) {
		t.Parallel()
		b, f := setup(t), newRelayTLSFiles(t)
		srv := servers.RedisTLS(t, f.Certs, tlsPassword, "yes")
		q := url.Values{"tls_cert": {f.ClientCert}, "tls_key": {f.key}}
		res := outboxCmd(t, b.schema, "--log-level", "error", "relay", "--sink", "rediss://:"+tlsPassword+"@"+srv.Addr+"/0?"+q.Encode())
		requireFail(t, res, 1, "sink rediss://"+srv.Addr+"/0?…", "certificate signed by unknown authority", "set tls_ca in the URL")
		f.requireQuiet(t, res.stderr)
	})
	t.Run("mqtts", func(t *testing.T) {
		t.Parallel()
		b, f := setup(t), newRelayTLSFiles(t)
		srv := servers.MQTTBrokerTLS(t, f.Certs, true)
		q := url.Values{"tls_cert": {f.ClientCert}, "tls_key": {f.key}, "connect_timeout": {"5s"}}
		res := outboxCmd(t, b.schema, "--log-level", "error", "relay", "--sink", "mqtts://relay:"+tlsPassword+"@"+srv.Addr+"?"+q.Encode())
		requireFail(t, res, 1, "sink mqtts://"+srv.Addr+"?…", "certificate signed by unknown authority", "set tls_ca in the URL")
		f.requireQuiet(t, res.stderr)
	})
	t.Run("https", func(t *testing.T) {
		t.Parallel()
		b, f := setup(t), newRelayTLSFiles(t)
		srv := newTLSWebhook(t, f.Certs)
		ids := b.writeOrders(t, 1)
		// A handshake that fails fails every event alike: the relay opens
		// the sink's circuit and says why, and spends no attempt.
		p := start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", b.schema, "relay", "--sink", srv.URL+"/hook",
			"--webhook-cert", f.ClientCert, "--webhook-key", f.key, "--poll-interval", "50ms")
		testutil.WaitFor(t, 60*time.Second, "the sink reported unreachable", func() bool {
			require.False(t, p.exited(), "relay exited early; stderr:\n%s", p.stderr.String())
			return strings.Contains(p.stderr.String(), "sink unreachable: circuit open")
		})
		require.Equal(t, 0, p.stop(t, syscall.SIGTERM), "stderr:\n%s", p.stderr.String())
		line := ""
		for l := range strings.Lines(p.stderr.String()) {
			if strings.Contains(l, "sink unreachable: circuit open") {
				line = l
			}
		}
		require.Contains(t, line, "certificate signed by unknown authority")
		require.Contains(t, line, "--webhook-ca")
		e := b.event(t, ids[0])
		require.Zero(t, e.Attempts)
		require.NotEqual(t, "processed", string(e.Status))
		require.Zero(t, srv.count())
		f.requireQuiet(t, p.stderr.String())
	})
}

// TestRelayTLSUsageErrors checks that a TLS file the relay cannot use, or
// a TLS setting the sink does not take, exits 2 with one line naming the
// option and the fix, before the relay connects to anything; and that no
// line quotes the key's path.
func TestRelayTLSUsageErrors(t *testing.T) {
	t.Parallel()
	f := newRelayTLSFiles(t)
	badCAFile := configFile(t, "sink:\n  url: https://hooks.example.com/x\n  webhook_ca: /nonexistent/ca.pem\n")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"RedisMissingCA", []string{"--sink", "rediss://:" + tlsPassword + "@redis:6380/0?tls_ca=/nonexistent/ca.pem"},
			[]string{"invalid --sink: invalid URL option tls_ca: cannot read the CA file: open /nonexistent/ca.pem: no such file or directory"}},
		{"RedisCertWithoutKey", []string{"--sink", "rediss://redis:6380/0?tls_cert=" + f.ClientCert},
			[]string{"invalid URL option tls_cert: is set without tls_key: tls_cert and tls_key go together"}},
		{"RedisPlain", []string{"--sink", "redis://redis:6379/0?tls_ca=" + f.CA},
			[]string{"invalid URL option tls_ca: is for TLS but redis://redis:6379/0 is a plain connection: use rediss:// for TLS"}},
		{"MQTTNoPEM", []string{"--sink", "mqtts://relay:" + tlsPassword + "@mqtt:8883?tls_ca=" + f.noPEM},
			[]string{"invalid URL option tls_ca:", "holds no PEM certificate: point it at the CA's certificate"}},
		{"MQTTMissingKey", []string{"--sink", "mqtts://mqtt:8883?tls_cert=" + f.ClientCert + "&tls_key=" + f.missing},
			[]string{"invalid URL option tls_key: cannot read the key file: no such file or directory: check the path"}},
		{"MQTTKeyIsACertificate", []string{"--sink", "mqtts://mqtt:8883?tls_cert=" + f.ClientCert + "&tls_key=" + f.ClientCert},
			[]string{"invalid URL option tls_key: holds no PEM private key: point it at the key of tls_cert"}},
		{"MQTTPlain", []string{"--sink", "mqtt://mqtt:1883?tls_cert=" + f.ClientCert + "&tls_key=" + f.key},
			[]string{"use mqtts:// for TLS"}},
		{"WebhookMissingCA", []string{"--sink", "https://hooks.example.com/x", "--webhook-ca", "/nonexistent/ca.pem"},
			[]string{"invalid --webhook-ca: cannot read the CA file: open /nonexistent/ca.pem: no such file or directory"}},
		{"WebhookNoPEM", []string{"--sink", "https://hooks.example.com/x", "--webhook-ca", f.noPEM},
			[]string{"invalid --webhook-ca:", "holds no PEM certificate"}},
		{"WebhookCertWithoutKey", []string{"--sink", "https://hooks.example.com/x", "--webhook-cert", f.ClientCert},
			[]string{"invalid --webhook-cert: is set without --webhook-key: --webhook-cert and --webhook-key go together"}},
		{"WebhookMissingKey", []string{"--sink", "https://hooks.example.com/x", "--webhook-cert", f.ClientCert, "--webhook-key", f.missing},
			[]string{"invalid --webhook-key: cannot read the key file: no such file or directory"}},
		{"WebhookWrongKey", []string{"--sink", "https://hooks.example.com/x", "--webhook-cert", f.ClientCert, "--webhook-key", f.ServerKey},
			[]string{"invalid --webhook-key: does not make a key pair with --webhook-cert", "private key does not match public key"}},
		{"WebhookEmptyFlag", []string{"--sink", "https://hooks.example.com/x", "--webhook-ca", ""},
			[]string{"invalid --webhook-ca: is empty: name a PEM file, or remove the flag"}},
		{"WebhookFromFile", []string{"--config", badCAFile},
			[]string{"invalid sink.webhook_ca (" + badCAFile + ":3): cannot read the CA file"}},
		{"WebhookOverHTTP", []string{"--sink", "http://hooks.example.com/x", "--webhook-ca", f.CA},
			[]string{"--webhook-ca needs an https:// --sink"}},
		{"WebhookFlagForBroker", []string{"--sink", "nats://127.0.0.1:4222", "--webhook-key", f.key},
			[]string{"--webhook-key does not apply to the nats sink", "a broker sink takes its CA and client certificate in the --sink URL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, nil, append([]string{"--database-url", testutil.DatabaseURL(), "relay"}, tc.args...)...)
			requireFail(t, res, 2, tc.want...)
			f.requireQuiet(t, res.stderr)
		})
	}
}
