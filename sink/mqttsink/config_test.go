package mqttsink_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil/configtest"
	"github.com/outboxkit/outbox/internal/testutil/servers"
	"github.com/outboxkit/outbox/sink/mqttsink"
	"github.com/outboxkit/outbox/sinktest"
)

const secret = "hunter2-secret"

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	c := mqttsink.Config{URL: "mqtt://h"}.WithDefaults()
	require.True(t, strings.HasPrefix(c.ClientID, mqttsink.ClientIDPrefixDefault), c.ClientID)
	require.NotEqual(t, c.ClientID, mqttsink.Config{}.WithDefaults().ClientID, "client IDs are random")
	require.Equal(t, mqttsink.SourceDefault, c.Source)
	require.Equal(t, mqttsink.DialTimeoutDefault, c.DialTimeout)
	require.Equal(t, mqttsink.KeepAliveDefault, c.KeepAlive)
	require.Equal(t, mqttsink.ReconnectWaitDefault, c.ReconnectWait)
	require.NotNil(t, c.Logger)
}

func TestConfigFromURL(t *testing.T) {
	t.Parallel()
	c, err := mqttsink.ConfigFromURL("mqtts://relay:" + secret + "@mqtt.example.com:8883?client_id=orders-1" +
		"&route=shop%2F%7Baggregate_type%7D%2F%7Bevent_type%7D&source=urn%3Ashop&keepalive=15s&connect_timeout=3s")
	require.NoError(t, err)
	require.Equal(t, "mqtts://relay:"+secret+"@mqtt.example.com:8883", c.URL)
	require.Equal(t, "orders-1", c.ClientID)
	require.Equal(t, "urn:shop", c.Source)
	require.Equal(t, 15*time.Second, c.KeepAlive)
	require.Equal(t, 3*time.Second, c.DialTimeout)
	require.NotNil(t, c.Router)
	e := sinktest.NewEvent("order.created", `{}`)
	require.Equal(t, "shop/order/order.created", c.Router.Route(&e))

	for _, u := range []string{"mqtt://localhost", "ssl://h:8883", "tcp://h:1883", "tls://h"} {
		c, err = mqttsink.ConfigFromURL(u)
		require.NoError(t, err)
		require.Equal(t, mqttsink.Config{URL: u}, c)
	}
}

// TestConfigFromURLTLS checks the tls options: read into Config.TLS on the
// TLS schemes, taken out of the URL, refused on the plain ones.
func TestConfigFromURLTLS(t *testing.T) {
	t.Parallel()
	certs := servers.NewCerts(t)
	c, err := mqttsink.ConfigFromURL("mqtts://relay:" + secret + "@mqtt.example.com:8883?client_id=x&tls_ca=" + certs.CA +
		"&tls_cert=" + certs.ClientCert + "&tls_key=" + certs.ClientKey + "&tls_server_name=mqtt.internal")
	require.NoError(t, err)
	require.Equal(t, "mqtts://relay:"+secret+"@mqtt.example.com:8883", c.URL)
	require.NotNil(t, c.TLS)
	require.True(t, c.TLS.RootCAs.Equal(certs.Pool()), "trusts the CA alone")
	require.Len(t, c.TLS.Certificates, 1)
	require.Equal(t, "mqtt.internal", c.TLS.ServerName)
	for _, u := range []string{"ssl://h?tls_ca=" + certs.CA, "tls://h?tls_ca=" + certs.CA} {
		c, err = mqttsink.ConfigFromURL(u)
		require.NoError(t, err, u)
		require.NotNil(t, c.TLS, u)
	}

	for _, tc := range []struct{ url, field, text string }{
		{"mqtt://u:" + secret + "@h?tls_ca=" + certs.CA, "URL option tls_ca", "is for TLS but mqtt://h is a plain connection: use mqtts:// for TLS"},
		{"tcp://u:" + secret + "@h?tls_cert=" + certs.ClientCert + "&tls_key=" + certs.ClientKey, "URL option tls_cert", "use mqtts://"},
		{"mqtt://u:" + secret + "@h?tls=true", "URL option tls", "use mqtts://"},
		{"mqtts://u:" + secret + "@h?tls=false", "URL option tls", "is false but mqtts://h is a TLS URL: use mqtt:// for a plain connection"},
		{"mqtts://u:" + secret + "@h?tls_ca=/nonexistent/ca.pem", "URL option tls_ca", "cannot read the CA file"},
		{"mqtts://u:" + secret + "@h?tls_key=" + certs.ClientKey, "URL option tls_key", "is set without tls_cert"},
		{"mqtts://u:" + secret + "@h?tls_cert=" + certs.ClientCert + "&tls_key=" + certs.CA, "URL option tls_key", "holds no PEM private key"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			_, err := mqttsink.ConfigFromURL(tc.url)
			configtest.RequireError(t, err, tc.field, tc.text, secret)
		})
	}
}

func TestConfigFromURLRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, text string }{
		{"", "is empty"},
		{"http://h/", `has scheme "http": use mqtt:// or mqtts://`},
		{"mqtt:h", "has no host"},
		{"mqtt://u:" + secret + "@h:0", `has port "0"`},
		{"mqtt://u:" + secret + "@h/topic", "has a path"},
		{"mqtt://u:" + secret + "@h#x", "#fragment"},
		{"mqtt://u:" + secret + "@[::1", "does not parse"},
		{"mqtt://u:" + secret + "@h?qos=2", `unknown option "qos"`},
		{"mqtt://u:" + secret + "@h?client_id=a&client_id=b", `"client_id" is given 2 times`},
		{"mqtt://u:" + secret + "@h?keepalive=soon", `keepalive="soon": use a positive duration`},
		{"mqtt://u:" + secret + "@h?route=%7Bnope%7D", `route option: route template "{nope}"`},
		{"mqtt://u:" + secret + "@h?x=%zz", "the query does not parse"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			_, err := mqttsink.ConfigFromURL(tc.url)
			configtest.RequireError(t, err, "URL", tc.text, secret)
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	const u = "mqtt://u:" + secret + "@127.0.0.1:1"
	for _, tc := range []struct {
		name  string
		cfg   mqttsink.Config
		field string
		text  string
	}{
		{"NoURL", mqttsink.Config{}, "URL", "is empty"},
		{"Query", mqttsink.Config{URL: u + "?client_id=x"}, "URL", "has a query: parse the URL with ConfigFromURL"},
		{"ClientID", mqttsink.Config{URL: u, ClientID: "a\x00b"}, "ClientID", "is not a valid MQTT client ID"},
		{"KeepAlive", mqttsink.Config{URL: u, KeepAlive: time.Millisecond}, "KeepAlive", "use at least 1s"},
		{"DialTimeout", mqttsink.Config{URL: u, DialTimeout: -time.Second}, "DialTimeout", "is -1s"},
		{"ReconnectWait", mqttsink.Config{URL: u, ReconnectWait: -time.Second}, "ReconnectWait", "is -1s"},
		{"Source", mqttsink.Config{URL: u, Source: " /x"}, "Source", "is not a URI reference"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := mqttsink.New(t.Context(), tc.cfg)
			require.Nil(t, s)
			configtest.RequireError(t, err, tc.field, tc.text, secret)
		})
	}
}

func TestConfigPrintsNoPassword(t *testing.T) {
	t.Parallel()
	c := mqttsink.Config{URL: "mqtt://user:" + secret + "@h:1883", ClientID: "c"}
	for _, s := range configtest.Printed(c) {
		require.NotContains(t, s, secret)
		require.Contains(t, s, "mqtt://h:1883")
	}
}

func FuzzConfigFromURL(f *testing.F) {
	for _, s := range []string{
		"mqtt://localhost:1883", "mqtts://u:p@h?client_id=c&keepalive=5s",
		"ssl://h?route=%7Bevent_type%7D", "mqtt://u:p@[::1]:1883", "mqtt://%zz",
		"mqtts://h?tls=true&tls_server_name=x", "mqtt://h?tls_ca=/nonexistent", "tls://h?tls=false",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := mqttsink.ConfigFromURL(raw)
		if err != nil {
			configtest.RequireURLError(t, raw, err)
			return
		}
		again, err := mqttsink.ConfigFromURL(c.URL)
		require.NoError(t, err)
		require.Equal(t, c.URL, again.URL)
	})
}
