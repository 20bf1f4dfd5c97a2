package natssink_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/configtest"
	"github.com/outboxkit/outbox/sink/natssink"
)

func TestConfigFromURL(t *testing.T) {
	t.Parallel()
	certFile, keyFile := configtest.WriteCert(t)
	for _, tc := range []struct {
		name  string
		url   string
		check func(t *testing.T, c natssink.Config)
	}{
		{"Plain", "nats://127.0.0.1:4222", func(t *testing.T, c natssink.Config) {
			require.Equal(t, []string{"nats://127.0.0.1:4222"}, c.Servers)
			require.Empty(t, c.User)
			require.Nil(t, c.TLS)
			require.Nil(t, c.Router, "nil: New fills in the default route")
		}},
		{"DefaultPort", "NATS://nats.internal", func(t *testing.T, c natssink.Config) {
			require.Equal(t, []string{"nats://nats.internal:4222"}, c.Servers)
		}},
		{"Cluster", "nats://a:4222,b:4223,[::1]:4224,[fe80::1]", func(t *testing.T, c natssink.Config) {
			require.Equal(t, []string{"nats://a:4222", "nats://b:4223", "nats://[::1]:4224", "nats://[fe80::1]:4222"}, c.Servers)
		}},
		{"UserPassword", "nats://alice:p%40ss%3Aword@h:4222/", func(t *testing.T, c natssink.Config) {
			require.Equal(t, "alice", c.User)
			require.Equal(t, "p@ss:word", c.Password)
			require.Empty(t, c.Token)
		}},
		{"Token", "nats://s3cr3t-token@h", func(t *testing.T, c natssink.Config) {
			require.Equal(t, "s3cr3t-token", c.Token)
			require.Empty(t, c.User)
		}},
		{"Stream", "nats://h?stream=ORDERS&create_stream=true&stream_subjects=order.>,user.*&duplicate_window=5m", func(t *testing.T, c natssink.Config) {
			require.Equal(t, "ORDERS", c.Stream)
			require.True(t, c.CreateStream)
			require.Equal(t, []string{"order.>", "user.*"}, c.StreamSubjects)
			require.Equal(t, 5*time.Minute, c.DuplicateWindow)
		}},
		{"BareFlag", "nats://h?stream=S&create_stream", func(t *testing.T, c natssink.Config) {
			require.True(t, c.CreateStream)
		}},
		{"Route", "nats://h?route=app.%7Bevent_type%7D&source=%2Fshop", func(t *testing.T, c natssink.Config) {
			e := outbox.Event{EventType: "created"}
			require.Equal(t, "app.created", c.Router.Route(&e))
			require.Equal(t, "/shop", c.Source)
		}},
		{"Timeouts", "nats://h?connect_timeout=2s&ack_timeout=750ms&reconnect_wait=100ms&max_pending=10&name=relay-1", func(t *testing.T, c natssink.Config) {
			require.Equal(t, 2*time.Second, c.ConnectTimeout)
			require.Equal(t, 750*time.Millisecond, c.AckTimeout)
			require.Equal(t, 100*time.Millisecond, c.ReconnectWait)
			require.Equal(t, 10, c.MaxPending)
			require.Equal(t, "relay-1", c.Name)
		}},
		{"TLS", "nats://h?tls=true&tls_server_name=nats.example.com", func(t *testing.T, c natssink.Config) {
			require.NotNil(t, c.TLS)
			require.Equal(t, "nats.example.com", c.TLS.ServerName)
			require.Nil(t, c.TLS.RootCAs, "the system pool")
		}},
		{"TLSFiles", "nats://h?tls_ca=" + certFile + "&tls_cert=" + certFile + "&tls_key=" + keyFile, func(t *testing.T, c natssink.Config) {
			require.NotNil(t, c.TLS, "tls_ options imply TLS")
			require.NotNil(t, c.TLS.RootCAs)
			require.Len(t, c.TLS.Certificates, 1)
		}},
		{"TLSOff", "nats://h?tls=false", func(t *testing.T, c natssink.Config) { require.Nil(t, c.TLS) }},
		{"Creds", "nats://h?creds=" + certFile, func(t *testing.T, c natssink.Config) { require.Equal(t, certFile, c.CredsFile) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := natssink.ConfigFromURL(tc.url)
			require.NoError(t, err)
			tc.check(t, c)
		})
	}
}

func TestConfigFromURLErrors(t *testing.T) {
	t.Parallel()
	const pw = "hunter2-password"
	for _, tc := range []struct {
		name, url, field, text string
	}{
		{"NotAURL", "127.0.0.1:4222", "URL", "use nats://host:port"},
		{"Scheme", "kafka://u:" + pw + "@h", "URL", `has scheme "kafka"`},
		{"NoHost", "nats://u:" + pw + "@", "URL", "has no host"},
		{"EmptyHostEntry", "nats://a,,b", "URL", "empty entry"},
		{"BadPort", "nats://u:" + pw + "@h:http", "URL", "port is not a number"},
		{"PortRange", "nats://h:70000", "URL", "port is not a number from 1 to 65535"},
		{"BareIPv6", "nats://::1", "URL", "in brackets"},
		{"Path", "nats://h/stream", "URL", "has a path"},
		{"Fragment", "nats://h#x", "URL", "#fragment"},
		{"EmptyUser", "nats://:" + pw + "@h", "URL", "without a user name"},
		{"BadEscape", "nats://u:%zz" + pw + "@h", "URL", "badly percent-encoded password"},
		{"UnknownOption", "nats://h?stream_name=X", "URL", `unknown option "stream_name": use one of tls, `},
		{"RepeatedOption", "nats://h?stream=A&stream=B", "URL", `option "stream" 2 times`},
		{"EmptyStream", "nats://h?stream=", "URL option stream", "has no value: give one (?stream=…) or leave the option out"},
		{"EmptyDuration", "nats://h?ack_timeout=", "URL option ack_timeout", "has no value"},
		{"EmptyRoute", "nats://h?route=", "URL option route", "has no value"},
		{"BadQuery", "nats://h?a=%zz", "URL", "does not parse"},
		{"BadBool", "nats://h?tls=yes", "URL option tls", `is "yes": use true or false`},
		{"BadDuration", "nats://h?ack_timeout=5", "URL option ack_timeout", "positive duration"},
		{"NegativeDuration", "nats://h?reconnect_wait=-1s", "URL option reconnect_wait", "positive duration"},
		{"BadInt", "nats://h?max_pending=many", "URL option max_pending", "positive whole number"},
		{"BadRoute", "nats://h?route=%7Bnope%7D", "URL option route", "unknown placeholder"},
		{"TLSOffWithCA", "nats://h?tls=false&tls_ca=/x", "URL option tls", "drop tls=false"},
		{"MissingCA", "nats://h?tls_ca=/nonexistent/ca.pem", "URL option tls_ca", "cannot read the CA file"},
		{"CertWithoutKey", "nats://h?tls_cert=/x.pem", "URL option tls_cert", "go together"},
		{"MissingCreds", "nats://h?creds=/nonexistent/user.creds", "URL option creds", "cannot read the credentials file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := natssink.ConfigFromURL(tc.url)
			configtest.RequireError(t, err, tc.field, tc.text, pw)
		})
	}
}

func TestConfigFromURLCAWithoutCertificates(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "empty.pem")
	require.NoError(t, os.WriteFile(f, []byte("not a certificate"), 0o600))
	_, err := natssink.ConfigFromURL("nats://h?tls_ca=" + f)
	require.ErrorContains(t, err, "holds no PEM certificate")
}

func FuzzConfigFromURL(f *testing.F) {
	for _, seed := range []string{
		"nats://127.0.0.1:4222",
		"nats://u:p@a:1,b:2?stream=S&create_stream=true&stream_subjects=a.>",
		"nats://tok@[::1]:4222?route=%7Bevent_type%7D",
		"nats://h?tls=true&ack_timeout=1s",
		"nats://:@",
		"nats://a,,b",
		"nats://h?%zz",
		"nats://[::1",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := natssink.ConfigFromURL(raw)
		if err != nil {
			configtest.RequireHostListError(t, raw, err)
			return
		}
		require.NotEmpty(t, c.Servers)
		for _, s := range c.Servers {
			require.True(t, strings.HasPrefix(s, "nats://"), s)
		}
	})
}
