package kafkasink_test

// The TLS tests run against an in-process kfake cluster with a TLS
// listener (kfake.TLS), also when OUTBOX_TEST_KAFKA_BROKERS names a real
// cluster: they need the test's own certificates on the brokers.

import (
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/brokertest"
	"github.com/outboxkit/outbox/internal/testutil/servers"
	"github.com/outboxkit/outbox/sink/kafkasink"
)

// tlsPassword is the SASL password of relay; no error may quote it.
const tlsPassword = "tls-s3cret-pass"

// tlsCluster is a one-broker kfake cluster that serves only TLS, with
// topic, closed when t ends.
type tlsCluster struct {
	addr  string
	topic string
	certs *servers.Certs
	sasl  bool // the brokers require SASL PLAIN as relay
}

// newTLSCluster starts the cluster, verifying client certificates as auth
// asks; with sasl it requires SASL PLAIN as relay.
func newTLSCluster(t *testing.T, auth tls.ClientAuthType, sasl bool) *tlsCluster {
	t.Helper()
	certs := servers.NewCerts(t)
	topic := "outbox-tls-" + brokertest.RandomName()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.TLS(certs.ServerTLS(auth)), kfake.SeedTopics(1, topic)}
	if sasl {
		opts = append(opts, kfake.EnableSASL(), kfake.Superuser("PLAIN", "relay", tlsPassword))
	}
	fake, err := kfake.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(fake.Close)
	return &tlsCluster{addr: fake.ListenAddrs()[0], topic: topic, certs: certs, sasl: sasl}
}

// url is the sink URL for the cluster with the tls options of q and a
// route to the cluster's topic.
func (c *tlsCluster) url(q url.Values) string {
	q.Set("route", c.topic)
	return "kafka://" + c.addr + "?" + q.Encode()
}

// records consumes n records of the topic over TLS with the client
// certificate.
func (c *tlsCluster) records(t *testing.T, n int) []*kgo.Record {
	t.Helper()
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.addr), kgo.DialTLSConfig(c.certs.ClientTLS(true)),
		kgo.ConsumeTopics(c.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
	if c.sasl {
		opts = append(opts, kgo.SASL(plain.Auth{User: "relay", Pass: tlsPassword}.AsMechanism()))
	}
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n {
		fetches := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "only %d of %d records arrived", len(got), n)
		for _, fe := range fetches.Errors() {
			require.NoError(t, fe.Err, "fetch %s/%d", fe.Topic, fe.Partition)
		}
		got = append(got, fetches.Records()...)
	}
	return got
}

// TestTLSPublishesEndToEnd produces through a sink configured from a
// kafka:// URL with the tls options to a cluster that serves only TLS,
// and consumes the records back over TLS.
func TestTLSPublishesEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		auth  tls.ClientAuthType
		query func(c *servers.Certs) url.Values
		// dial, when set, is Config.Dial: the sink then runs TLS over
		// its connections itself instead of franz-go.
		dial bool
		// sasl makes the brokers require SASL PLAIN as relay, which the
		// URL's user info then gives (SASL_SSL).
		sasl bool
	}{
		{"ServerCertificate", tls.NoClientCert, func(c *servers.Certs) url.Values {
			return url.Values{"tls": {"true"}, "tls_ca": {c.CA}}
		}, false, false},
		{"MutualTLS", tls.RequireAndVerifyClientCert, func(c *servers.Certs) url.Values {
			return url.Values{"tls": {"true"}, "tls_ca": {c.CA}, "tls_cert": {c.ClientCert}, "tls_key": {c.ClientKey}}
		}, false, false},
		{"ServerName", tls.RequireAndVerifyClientCert, func(c *servers.Certs) url.Values {
			return url.Values{"tls_ca": {c.CA}, "tls_cert": {c.ClientCert}, "tls_key": {c.ClientKey}, "tls_server_name": {"localhost"}}
		}, false, false},
		{"CustomDial", tls.RequireAndVerifyClientCert, func(c *servers.Certs) url.Values {
			return url.Values{"tls_ca": {c.CA}, "tls_cert": {c.ClientCert}, "tls_key": {c.ClientKey}}
		}, true, false},
		{"SASLOverTLS", tls.NoClientCert, func(c *servers.Certs) url.Values {
			return url.Values{"tls_ca": {c.CA}, "sasl": {"plain"}}
		}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newTLSCluster(t, tc.auth, tc.sasl)
			raw := c.url(tc.query(c.certs))
			if tc.sasl {
				raw = strings.Replace(raw, "kafka://", "kafka://relay:"+url.QueryEscape(tlsPassword)+"@", 1)
			}
			cfg, err := kafkasink.ConfigFromURL(raw)
			require.NoError(t, err)
			require.NotNil(t, cfg.TLS)
			cfg.Logger = quiet
			if tc.dial {
				var d net.Dialer
				cfg.Dial = d.DialContext
			}
			s := brokertest.Open(t, func(ctx context.Context) (*kafkasink.Sink, error) { return kafkasink.New(ctx, cfg) })

			events := []outbox.Event{brokertest.FullEvent(1, "x_tenant", "acme"), brokertest.FullEvent(2, "x_tenant", "acme")}
			require.Nil(t, s.Publish(t.Context(), events))
			got := c.records(t, len(events))
			require.Len(t, got, len(events))
			for i, r := range got {
				h := map[string]string{}
				for _, kv := range r.Headers {
					h[kv.Key] = string(kv.Value)
				}
				require.Equal(t, strconv.FormatInt(events[i].ID, 10), h["ce_id"])
				require.Equal(t, "acme", h["ce_xtenant"])
				require.JSONEq(t, string(events[i].Payload), string(r.Value))
			}
		})
	}
}

// TestTLSRefusalsFailInOneLine checks that New fails, on one line that
// says why and never quotes the password, when TLS cannot be set up.
func TestTLSRefusalsFailInOneLine(t *testing.T) {
	t.Parallel()
	c := newTLSCluster(t, tls.RequireAndVerifyClientCert, false)
	certs := c.certs
	for _, tc := range []struct {
		name  string
		query url.Values
		want  []string
	}{
		{"WrongCA", url.Values{"tls_ca": {certs.OtherCA}, "tls_cert": {certs.ClientCert}, "tls_key": {certs.ClientKey}},
			[]string{"certificate signed by unknown authority", "set tls_ca"}},
		{"WrongServerName", url.Values{"tls_ca": {certs.CA}, "tls_cert": {certs.ClientCert}, "tls_key": {certs.ClientKey}, "tls_server_name": {"wrong.example"}},
			[]string{"not wrong.example", "tls_server_name"}},
		// Capped at TLS 1.2 below (see servers.TLS12).
		{"NoClientCertificate", url.Values{"tls_ca": {certs.CA}}, []string{"remote error: tls:", "set tls_cert and tls_key"}},
		{"NoTLS", url.Values{}, []string{"whether the brokers expect TLS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.query.Set("sasl", "plain")
			tc.query.Set("connect_timeout", "3s")
			u, err := url.Parse(c.url(tc.query))
			require.NoError(t, err)
			u.User = url.UserPassword("relay", tlsPassword)
			cfg, err := kafkasink.ConfigFromURL(u.String())
			require.NoError(t, err)
			if tc.name == "NoClientCertificate" {
				servers.TLS12(cfg.TLS)
			}
			cfg.Logger = quiet
			s, err := kafkasink.New(t.Context(), cfg)
			require.Nil(t, s)
			brokertest.RequireConnectError(t, err, tlsPassword, append([]string{"kafkasink: cannot reach a broker of " + c.addr}, tc.want...)...)
		})
	}
}
