package sinkurl

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/configtest"
)

const secret = "hunter2-secret"

func TestParse(t *testing.T) {
	t.Parallel()
	u, err := Parse("amqp://u:"+secret+"@h:5672/v", "use amqp://host")
	require.NoError(t, err)
	require.Equal(t, "h:5672", u.Host)
	_, err = Parse("amqp://u:"+secret+"@[::1/", "use amqp://host")
	configtest.RequireError(t, err, "URL", "does not parse (missing ']' in host): use amqp://host", secret)
}

func TestCheckPort(t *testing.T) {
	t.Parallel()
	for raw, bad := range map[string]bool{
		"redis://h": false, "redis://h:1": false, "redis://h:65535": false, "redis://[::1]:6379": false,
		"redis://h:0": true, "redis://h:65536": true,
	} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		err = CheckPort("name", u)
		if !bad {
			require.NoError(t, err, raw)
			continue
		}
		configtest.RequireError(t, err, "URL", `name has port "`+u.Port()+`": use 1 to 65535`)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	u, err := url.Parse("amqps://user:" + secret + "@rabbit:5671/prod%2Fa?cacertfile=/etc/key.pem#x")
	require.NoError(t, err)
	require.Equal(t, "amqps://rabbit:5671/prod%2Fa", Redact(u, true))
	require.Equal(t, "amqps://rabbit:5671", Redact(u, false))
	require.Equal(t, "redis://?", Redact(&url.URL{Scheme: "redis"}, true))
	require.Equal(t, "mqtt://h:1883", Endpoint("mqtt://u:"+secret+"@h:1883/x", false))
	require.Equal(t, "redis://h/3", Endpoint("redis://u:"+secret+"@h/3", true))
	require.Equal(t, "(unparsable URL)", Endpoint("redis://u:"+secret+"@[::1", true))
}

func TestQuery(t *testing.T) {
	t.Parallel()
	once := []string{"a", "b"}
	q, err := Query("x://h", "a=1&b=2", once, true)
	require.NoError(t, err)
	require.Equal(t, url.Values{"a": {"1"}, "b": {"2"}}, q)
	q, err = Query("x://h", "a=1&other=2&other=3", once, false)
	require.NoError(t, err, "loose: other options are the client library's")
	require.Equal(t, []string{"2", "3"}, q["other"])
	for _, tc := range []struct {
		query  string
		strict bool
		text   string
	}{
		{"a=%zz", false, "x://h: the query does not parse: use option=value pairs joined by &"},
		{"c=1", true, `x://h: unknown option "c": use one of a, b`},
		{"a=1&a=2", true, `x://h: option "a" is given 2 times: give it once`},
		{"b=1&b=2", false, `x://h: option "b" is given 2 times: give it once`},
	} {
		_, err := Query("x://h", tc.query, once, tc.strict)
		configtest.RequireError(t, err, "URL", tc.text)
	}
}

func TestRoute(t *testing.T) {
	t.Parallel()
	r, err := Route(url.Values{})
	require.NoError(t, err)
	require.Nil(t, r)
	r, err = Route(url.Values{"route": {"app.{event_type}"}})
	require.NoError(t, err)
	e := outbox.Event{EventType: "created"}
	require.Equal(t, "app.created", r.Route(&e))
	_, err = Route(url.Values{"route": {"{nope}"}})
	configtest.RequireError(t, err, "URL", `route option: route template "{nope}"`)
}

func TestWithoutAndRejectSinkOptions(t *testing.T) {
	t.Parallel()
	u, err := url.Parse("amqp://u:p@h/v?exchange=e&heartbeat=5&route=r")
	require.NoError(t, err)
	q := u.Query()
	require.Equal(t, "amqp://u:p@h/v?heartbeat=5", Without(u, q, []string{"exchange", "route"}))
	require.Equal(t, "exchange=e&heartbeat=5&route=r", u.RawQuery, "u is left as it was")
	require.NoError(t, RejectSinkOptions("amqp://h/v", url.Values{"heartbeat": {"5"}}, []string{"exchange"}))
	err = RejectSinkOptions("amqp://h/v", url.Values{"exchange": {"e"}}, []string{"exchange"})
	configtest.RequireError(t, err, "URL", `amqp://h/v: "exchange" is a sink option: parse the URL with ConfigFromURL, or set the Config field`)
}

func TestSource(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{"/outbox": true, "urn:shop": true, "https://e.com/o": true, "": false, "a b": false, " /x": false, "%zz": false} {
		require.Equal(t, want, ValidSource(s), "ValidSource(%q)", s)
	}
	for s, ok := range map[string]bool{"/outbox": true, "": true, "a b": true, " /x": false, "/x\n": false, "%zz": false} {
		err := CheckSource(s)
		if ok {
			require.NoError(t, err, s)
			continue
		}
		configtest.RequireError(t, err, "Source", "is not a URI reference: use something like /outbox or urn:example:orders")
	}
}

func TestErrorsAndScrub(t *testing.T) {
	t.Parallel()
	configtest.RequireError(t, Errorf("MaxLen", "is %d", -1), "MaxLen", "is -1")
	configtest.RequireError(t, URLErrorf("has %s", "no host"), "URL", "has no host")
	require.Equal(t, "auth [REDACTED] for [REDACTED]@h", Scrub("auth "+secret+" for tok@h", secret, "", "tok"))
	require.Equal(t, "text", Scrub("text"))
}
