package amqpsink_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil/configtest"
	"github.com/outboxkit/outbox/sink/amqpsink"
	"github.com/outboxkit/outbox/sinktest"
)

const secret = "hunter2-secret"

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	c := amqpsink.Config{URL: "amqp://h"}.WithDefaults()
	require.Equal(t, amqpsink.ExchangeTypeDefault, c.ExchangeType)
	require.Equal(t, amqpsink.SourceDefault, c.Source)
	require.Equal(t, amqpsink.PropertyPrefixDefault, c.PropertyPrefix)
	require.Equal(t, amqpsink.DialTimeoutDefault, c.DialTimeout)
	require.Equal(t, amqpsink.HeartbeatDefault, c.Heartbeat)
	require.Equal(t, amqpsink.ReconnectWaitDefault, c.ReconnectWait)
	require.Equal(t, amqpsink.ConnectionNameDefault, c.ConnectionName)
	require.NotNil(t, c.Logger)
}

func TestConfigFromURL(t *testing.T) {
	t.Parallel()
	c, err := amqpsink.ConfigFromURL("amqps://user:" + secret + "@rabbit.example.com:5671/prod?exchange=events&exchange_type=direct" +
		"&declare_exchange=true&route=%7Bevent_type%7D&source=urn%3Ashop&unroutable=permanent&property_prefix=cloudEvents%3A" +
		"&connection_name=orders&heartbeat=5&cacertfile=%2Fetc%2Fca.pem")
	require.NoError(t, err)
	require.Equal(t, "amqps://user:"+secret+"@rabbit.example.com:5671/prod?cacertfile=%2Fetc%2Fca.pem&heartbeat=5", c.URL,
		"connection parameters stay in the URL, sink options leave it")
	require.Equal(t, "events", c.Exchange)
	require.Equal(t, "direct", c.ExchangeType)
	require.True(t, c.DeclareExchange)
	require.True(t, c.UnroutablePermanent)
	require.Equal(t, "urn:shop", c.Source)
	require.Equal(t, amqpsink.PrefixColon, c.PropertyPrefix)
	require.Equal(t, "orders", c.ConnectionName)
	require.NotNil(t, c.Router)
	e := sinktest.NewEvent("order.created", `{}`)
	require.Equal(t, "order.created", c.Router.Route(&e))

	c, err = amqpsink.ConfigFromURL("amqp://localhost")
	require.NoError(t, err)
	require.Equal(t, amqpsink.Config{URL: "amqp://localhost"}, c)
}

func TestConfigFromURLRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, text string }{
		{"", "is empty"},
		{"http://h/", `has scheme "http": use amqp:// or amqps://`},
		{"amqp:h", "has no //host"},
		{"amqp:///vhost", "has no host"},
		{"amqp://u:" + secret + "@h:99999/", `has port "99999"`},
		{"amqp://u:" + secret + "@h/a/b", "the vhost holds an unescaped /"},
		{"amqp://u:" + secret + "@h/#x", "#fragment"},
		{"amqp://u:" + secret + "@[::1/", "does not parse"},
		{"amqp://u:" + secret + "@h/?exchnage=x", `unknown option "exchnage"`},
		{"amqp://u:" + secret + "@h/?exchange=a&exchange=b", `"exchange" is given 2 times`},
		{"amqp://u:" + secret + "@h/?declare_exchange=yes please", "whitespace"},
		{"amqp://u:" + secret + "@h/?declare_exchange=maybe", `declare_exchange="maybe" is not a boolean`},
		{"amqp://u:" + secret + "@h/?unroutable=drop", `unroutable="drop": use retry or permanent`},
		{"amqp://u:" + secret + "@h/?route=%7Bnope%7D", `route option: route template "{nope}"`},
		{"amqp://u:" + secret + "@h/?x=%zz", "the query does not parse"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			_, err := amqpsink.ConfigFromURL(tc.url)
			configtest.RequireError(t, err, "URL", tc.text, secret)
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	const url = "amqp://u:" + secret + "@127.0.0.1:1/"
	for _, tc := range []struct {
		name  string
		cfg   amqpsink.Config
		field string
		text  string
	}{
		{"NoURL", amqpsink.Config{}, "URL", "is empty"},
		{"SinkOptionInURL", amqpsink.Config{URL: url + "?exchange=x"}, "URL", `"exchange" is a sink option: parse the URL with ConfigFromURL`},
		{"UnknownParam", amqpsink.Config{URL: url + "?foo=1"}, "URL", `unknown connection parameter "foo"`},
		{"BadHeartbeat", amqpsink.Config{URL: url + "?heartbeat=x"}, "URL", "heartbeat is not an uint16"},
		{"Exchange", amqpsink.Config{URL: url, Exchange: "a b"}, "Exchange", "is not a valid exchange name"},
		{"ExchangeType", amqpsink.Config{URL: url, ExchangeType: "round-robin"}, "ExchangeType", "use topic, direct, fanout, headers"},
		{"DeclareDefault", amqpsink.Config{URL: url, DeclareExchange: true}, "DeclareExchange", "Exchange is empty"},
		{"Source", amqpsink.Config{URL: url, Source: " /x"}, "Source", "is not a URI reference"},
		{"Prefix", amqpsink.Config{URL: url, PropertyPrefix: "ce_"}, "PropertyPrefix", `use "cloudEvents_" or "cloudEvents:"`},
		{"DialTimeout", amqpsink.Config{URL: url, DialTimeout: -time.Second}, "DialTimeout", "is -1s"},
		{"ReconnectWait", amqpsink.Config{URL: url, ReconnectWait: -time.Second}, "ReconnectWait", "is -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := amqpsink.New(t.Context(), tc.cfg)
			require.Nil(t, s)
			configtest.RequireError(t, err, tc.field, tc.text, secret)
		})
	}
}

func TestConfigPrintsNoPassword(t *testing.T) {
	t.Parallel()
	c := amqpsink.Config{URL: "amqp://user:" + secret + "@h:5672/v?heartbeat=5", Exchange: "x"}
	for _, s := range configtest.Printed(c) {
		require.NotContains(t, s, secret)
		require.Contains(t, s, "amqp://h:5672/v")
	}
}

func FuzzConfigFromURL(f *testing.F) {
	for _, s := range []string{
		"amqp://guest:guest@localhost:5672/", "amqps://u:p@h/v?exchange=e&declare_exchange=1",
		"amqp://h/%2F?route=%7Bevent_type%7D", "amqp://u:p@[::1]:5672", "amqp://h?unroutable=permanent", "amqp://%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := amqpsink.ConfigFromURL(raw)
		if err != nil {
			configtest.RequireURLError(t, raw, err)
			return
		}
		// What parses once parses again to the same connection URL.
		again, err := amqpsink.ConfigFromURL(c.URL)
		require.NoError(t, err)
		require.Equal(t, c.URL, again.URL)
	})
}
