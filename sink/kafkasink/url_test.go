package kafkasink_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/configtest"
	"github.com/outboxkit/outbox/sink/kafkasink"
)

func TestConfigFromURL(t *testing.T) {
	t.Parallel()
	certFile, keyFile := configtest.WriteCert(t)
	for _, tc := range []struct {
		name  string
		url   string
		check func(t *testing.T, c kafkasink.Config)
	}{
		{"Plain", "kafka://127.0.0.1:9092", func(t *testing.T, c kafkasink.Config) {
			require.Equal(t, []string{"127.0.0.1:9092"}, c.Brokers)
			require.Empty(t, c.User)
			require.Nil(t, c.TLS)
			require.Nil(t, c.Router, "nil: New fills in the default route")
		}},
		{"DefaultPort", "KAFKA://kafka.internal", func(t *testing.T, c kafkasink.Config) {
			require.Equal(t, []string{"kafka.internal:9092"}, c.Brokers)
		}},
		{"Cluster", "kafka://a:9092,b:9093,[::1]:9094,[fe80::1]", func(t *testing.T, c kafkasink.Config) {
			require.Equal(t, []string{"a:9092", "b:9093", "[::1]:9094", "[fe80::1]:9092"}, c.Brokers)
		}},
		{"SASL", "kafka://alice:p%40ss%3Aword@h:9092/?sasl=SCRAM-SHA-512", func(t *testing.T, c kafkasink.Config) {
			require.Equal(t, "alice", c.User)
			require.Equal(t, "p@ss:word", c.Password)
			require.Equal(t, kafkasink.SASLScramSHA512, c.SASL)
		}},
		{"Options", "kafka://h?route=app.%7Bevent_type%7D&source=%2Fshop&client_id=relay-1&auto_create_topics=true&max_record_bytes=2000000&compression=zstd&linger=5ms&connect_timeout=3s&delivery_timeout=30s", func(t *testing.T, c kafkasink.Config) {
			e := outbox.Event{EventType: "created"}
			require.Equal(t, "app.created", c.Router.Route(&e))
			require.Equal(t, "/shop", c.Source)
			require.Equal(t, "relay-1", c.ClientID)
			require.True(t, c.AutoCreateTopics)
			require.Equal(t, 2000000, c.MaxRecordBytes)
			require.Equal(t, "zstd", c.Compression)
			require.Equal(t, 5*time.Millisecond, c.Linger)
			require.Equal(t, 3*time.Second, c.ConnectTimeout)
			require.Equal(t, 30*time.Second, c.DeliveryTimeout)
		}},
		{"NoLinger", "kafka://h?linger=0", func(t *testing.T, c kafkasink.Config) {
			require.Equal(t, kafkasink.NoLinger, c.Linger)
			require.Equal(t, kafkasink.NoLinger, c.WithDefaults().Linger, "not the default")
		}},
		{"TLS", "kafka://h?tls=true&tls_server_name=kafka.example.com", func(t *testing.T, c kafkasink.Config) {
			require.NotNil(t, c.TLS)
			require.Equal(t, "kafka.example.com", c.TLS.ServerName)
		}},
		{"TLSFiles", "kafka://h?tls_ca=" + certFile + "&tls_cert=" + certFile + "&tls_key=" + keyFile, func(t *testing.T, c kafkasink.Config) {
			require.NotNil(t, c.TLS, "tls_ options imply TLS")
			require.NotNil(t, c.TLS.RootCAs)
			require.Len(t, c.TLS.Certificates, 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := kafkasink.ConfigFromURL(tc.url)
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
		{"NotAURL", "127.0.0.1:9092", "URL", "use kafka://host:port"},
		{"Scheme", "nats://u:" + pw + "@h", "URL", `has scheme "nats"`},
		{"NoHost", "kafka://u:" + pw + "@", "URL", "has no host"},
		{"EmptyHostEntry", "kafka://a,,b", "URL", "empty entry"},
		{"BadPort", "kafka://u:" + pw + "@h:http?sasl=plain", "URL", "port is not a number"},
		{"BareIPv6", "kafka://::1", "URL", "in brackets"},
		{"Path", "kafka://h/topic", "URL", "has a path"},
		{"UserWithoutPassword", "kafka://alice@h", "URL", "without a password"},
		{"NoSASL", "kafka://u:" + pw + "@h", "URL option sasl", "credentials in the URL need ?sasl="},
		{"UnknownSASL", "kafka://u:" + pw + "@h?sasl=gssapi", "URL option sasl", `is "gssapi"`},
		{"SASLWithoutUser", "kafka://h?sasl=plain", "URL option sasl", "no user:password@"},
		{"UnknownOption", "kafka://h?topic=x", "URL", `unknown option "topic": use one of tls, `},
		{"RepeatedOption", "kafka://h?route=a&route=b", "URL", `option "route" 2 times`},
		{"BadBool", "kafka://h?auto_create_topics=yes", "URL option auto_create_topics", "use true or false"},
		{"BadDuration", "kafka://h?delivery_timeout=5", "URL option delivery_timeout", "positive duration"},
		{"BadInt", "kafka://h?max_record_bytes=big", "URL option max_record_bytes", "positive whole number"},
		{"BadCompression", "kafka://h?compression=brotli", "URL option compression", `is "brotli"`},
		{"BadLinger", "kafka://h?linger=5", "URL option linger", `is "5": use a duration from 0`},
		{"NegativeLinger", "kafka://h?linger=-1ms", "URL option linger", "from 0 (send at once) to 1m0s, such as 5ms (default 10ms)"},
		{"LongLinger", "kafka://h?linger=2m", "URL option linger", "such as 5ms"},
		{"EmptyLinger", "kafka://h?linger=", "URL option linger", "has no value"},
		{"BadRoute", "kafka://h?route=%7Bnope%7D", "URL option route", "unknown placeholder"},
		{"MissingCA", "kafka://h?tls_ca=/nonexistent/ca.pem", "URL option tls_ca", "cannot read the CA file"},
		{"CertWithoutKey", "kafka://h?tls_cert=/x.pem", "URL option tls_cert", "go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := kafkasink.ConfigFromURL(tc.url)
			configtest.RequireError(t, err, tc.field, tc.text, pw)
		})
	}
}

func TestConfigFromURLCAWithoutCertificates(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "empty.pem")
	require.NoError(t, os.WriteFile(f, []byte("not a certificate"), 0o600))
	_, err := kafkasink.ConfigFromURL("kafka://h?tls_ca=" + f)
	require.ErrorContains(t, err, "holds no PEM certificate")
}

func FuzzConfigFromURL(f *testing.F) {
	for _, seed := range []string{
		"kafka://127.0.0.1:9092",
		"kafka://u:p@a:1,b:2?sasl=plain&route=t",
		"kafka://[::1]:9092?tls=true&compression=zstd",
		"kafka://h?delivery_timeout=1s",
		"kafka://h?linger=0",
		"kafka://h?linger=2ms&max_record_bytes=65536",
		"kafka://:@",
		"kafka://a,,b",
		"kafka://h?%zz",
		"kafka://[::1",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := kafkasink.ConfigFromURL(raw)
		if err != nil {
			configtest.RequireHostListError(t, raw, err)
			return
		}
		require.NotEmpty(t, c.Brokers)
		for _, b := range c.Brokers {
			require.NotContains(t, b, "@")
		}
	})
}
