package redissink_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil/configtest"
	"github.com/outboxkit/outbox/internal/testutil/servers"
	"github.com/outboxkit/outbox/sink/redissink"
	"github.com/outboxkit/outbox/sinktest"
)

const secret = "hunter2-secret"

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	c := redissink.Config{URL: "redis://h"}.WithDefaults()
	require.Equal(t, redissink.SourceDefault, c.Source)
	require.Equal(t, redissink.DialTimeoutDefault, c.DialTimeout)
	require.NotNil(t, c.Logger)
}

func TestConfigFromURL(t *testing.T) {
	t.Parallel()
	c, err := redissink.ConfigFromURL("rediss://app:" + secret + "@redis.example.com:6380/2?maxlen=1000&maxlen_exact=true" +
		"&route=events.%7Baggregate_type%7D&source=urn%3Ashop&read_timeout=2s")
	require.NoError(t, err)
	require.Equal(t, "rediss://app:"+secret+"@redis.example.com:6380/2?read_timeout=2s", c.URL,
		"connection options stay in the URL, sink options leave it")
	require.EqualValues(t, 1000, c.MaxLen)
	require.True(t, c.MaxLenExact)
	require.Equal(t, "urn:shop", c.Source)
	require.NotNil(t, c.Router)
	e := sinktest.NewEvent("order.created", `{}`)
	require.Equal(t, "events.order", c.Router.Route(&e))

	c, err = redissink.ConfigFromURL("redis://localhost")
	require.NoError(t, err)
	require.Equal(t, redissink.Config{URL: "redis://localhost"}, c)
}

// TestConfigFromURLTLS checks the tls options: read into Config.TLS on
// rediss://, taken out of the URL for go-redis, refused on redis://.
func TestConfigFromURLTLS(t *testing.T) {
	t.Parallel()
	certs := servers.NewCerts(t)
	c, err := redissink.ConfigFromURL("rediss://:" + secret + "@redis.example.com:6380/2?read_timeout=2s&tls_ca=" + certs.CA +
		"&tls_cert=" + certs.ClientCert + "&tls_key=" + certs.ClientKey + "&tls_server_name=redis.internal")
	require.NoError(t, err)
	require.Equal(t, "rediss://:"+secret+"@redis.example.com:6380/2?read_timeout=2s", c.URL)
	require.NotNil(t, c.TLS)
	require.True(t, c.TLS.RootCAs.Equal(certs.Pool()), "trusts the CA alone")
	require.Len(t, c.TLS.Certificates, 1)
	require.Equal(t, "redis.internal", c.TLS.ServerName)

	c, err = redissink.ConfigFromURL("rediss://h/0?tls=true")
	require.NoError(t, err)
	require.Equal(t, "rediss://h/0", c.URL)

	c, err = redissink.ConfigFromURL("rediss://h/0?skip_verify=true&tls_cert=" + certs.ClientCert + "&tls_key=" + certs.ClientKey)
	require.NoError(t, err, "a client certificate with go-redis's skip_verify")
	require.Equal(t, "rediss://h/0?skip_verify=true", c.URL)

	for _, tc := range []struct{ url, field, text string }{
		{"redis://:" + secret + "@h/0?tls_ca=" + certs.CA, "URL option tls_ca", "is for TLS but redis://h/0 is a plain connection: use rediss:// for TLS"},
		{"redis://:" + secret + "@h/0?tls=true", "URL option tls", "use rediss://"},
		{"rediss://:" + secret + "@h/0?tls=false", "URL option tls", "is false but rediss://h/0 is a TLS URL: use redis:// for a plain connection"},
		{"rediss://:" + secret + "@h/0?tls_ca=/nonexistent/ca.pem", "URL option tls_ca", "cannot read the CA file"},
		{"rediss://:" + secret + "@h/0?tls_cert=" + certs.ClientCert, "URL option tls_cert", "is set without tls_key"},
		{"rediss://:" + secret + "@h/0?tls_ca=" + certs.CA + "&skip_verify=true", "URL", "skip_verify=true turns off the verification tls_ca and tls_server_name are for: drop one"},
		{"rediss://:" + secret + "@h/0?tls_ca=a&tls_ca=b", "URL", `"tls_ca" is given 2 times`},
	} {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			_, err := redissink.ConfigFromURL(tc.url)
			configtest.RequireError(t, err, tc.field, tc.text, secret)
		})
	}
}

func TestConfigFromURLRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, text string }{
		{"", "is empty"},
		{"http://h/", `has scheme "http": use redis:// or rediss://`},
		{"redis:h", "has no host"},
		{"redis://:" + secret + "@h:0/", `has port "0"`},
		{"redis://:" + secret + "@h/#x", "#fragment"},
		{"redis://:" + secret + "@[::1/", "does not parse"},
		{"redis://:" + secret + "@h/?maxlen=-5", `maxlen="-5": use a whole number`},
		{"redis://:" + secret + "@h/?maxlen=lots", `maxlen="lots"`},
		{"redis://:" + secret + "@h/?maxlen=1&maxlen=2", `"maxlen" is given 2 times`},
		{"redis://:" + secret + "@h/?maxlen_exact=maybe", `maxlen_exact="maybe" is not a boolean`},
		{"redis://:" + secret + "@h/?route=%7Bnope%7D", `route option: route template "{nope}"`},
		{"redis://:" + secret + "@h/?x=%zz", "the query does not parse"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			_, err := redissink.ConfigFromURL(tc.url)
			configtest.RequireError(t, err, "URL", tc.text, secret)
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	const u = "redis://:" + secret + "@127.0.0.1:1/0"
	for _, tc := range []struct {
		name  string
		cfg   redissink.Config
		field string
		text  string
	}{
		{"NoURL", redissink.Config{}, "URL", "is empty"},
		{"SinkOptionInURL", redissink.Config{URL: u + "?maxlen=5"}, "URL", `"maxlen" is a sink option: parse the URL with ConfigFromURL`},
		{"TLSOptionInURL", redissink.Config{URL: "rediss://:" + secret + "@h/0?tls_ca=/ca.pem"}, "URL", `"tls_ca" is a sink option: parse the URL with ConfigFromURL, or set the Config field`},
		{"UnknownOption", redissink.Config{URL: u + "?foo=1"}, "URL", "unexpected option: foo"},
		{"BadDB", redissink.Config{URL: "redis://:" + secret + "@h/x"}, "URL", `invalid database number: "x"`},
		{"ClientAndURL", redissink.Config{URL: u, Client: admin(t)}, "URL", "is set along with Client"},
		{"MaxLen", redissink.Config{URL: u, MaxLen: -1}, "MaxLen", "is -1"},
		{"MaxLenExact", redissink.Config{URL: u, MaxLenExact: true}, "MaxLenExact", "MaxLen is 0"},
		{"Source", redissink.Config{URL: u, Source: " /x"}, "Source", "is not a URI reference"},
		{"DialTimeout", redissink.Config{URL: u, DialTimeout: -time.Second}, "DialTimeout", "is -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := redissink.New(t.Context(), tc.cfg)
			require.Nil(t, s)
			configtest.RequireError(t, err, tc.field, tc.text, secret)
		})
	}
}

func TestConfigPrintsNoPassword(t *testing.T) {
	t.Parallel()
	c := redissink.Config{URL: "redis://user:" + secret + "@h:6379/3?read_timeout=1s"}
	for _, s := range configtest.Printed(c) {
		require.NotContains(t, s, secret)
		require.Contains(t, s, "redis://h:6379/3")
	}
}

func FuzzConfigFromURL(f *testing.F) {
	for _, s := range []string{
		"redis://localhost:6379/0", "rediss://u:p@h/1?maxlen=100&maxlen_exact=1",
		"redis://h/?route=%7Bevent_type%7D", "redis://:p@[::1]:6379", "redis://%zz",
		"rediss://h/0?tls=true&tls_server_name=x", "redis://h/?tls_ca=/nonexistent", "rediss://h/?tls=false",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := redissink.ConfigFromURL(raw)
		if err != nil {
			configtest.RequireURLError(t, raw, err)
			return
		}
		again, err := redissink.ConfigFromURL(c.URL)
		require.NoError(t, err)
		require.Equal(t, c.URL, again.URL)
	})
}
