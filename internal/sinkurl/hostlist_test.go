package sinkurl

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/configtest"
)

var testForm = HostListForm{
	Scheme: "kafka", DefaultPort: "9092", Hosts: "Kafka URLs name brokers only",
	Credentials: "a user name", Options: []string{"tls", "route", "n"},
}

func TestSplitHostList(t *testing.T) {
	t.Parallel()
	p, err := SplitHostList("KAFKA://alice:p%40ss%3Aword@a,b:9093,[::1]:9094,[fe80::1]/?route=x&n=1", testForm)
	require.NoError(t, err)
	require.Equal(t, HostList{
		User: "alice", Password: "p@ss:word", HasUser: true, HasPassword: true,
		Hosts: []string{"a:9092", "b:9093", "[::1]:9094", "[fe80::1]:9092"},
		Query: map[string][]string{"route": {"x"}, "n": {"1"}},
	}, p)

	p, err = SplitHostList("kafka://token@h", testForm)
	require.NoError(t, err)
	require.True(t, p.HasUser)
	require.False(t, p.HasPassword)
	require.Equal(t, "token", p.User)
}

func TestSplitHostListErrors(t *testing.T) {
	t.Parallel()
	const pw = "hunter2-password"
	for _, tc := range []struct{ url, text string }{
		{"127.0.0.1:9092", "is not a URL: use kafka://host:port"},
		{"nats://u:" + pw + "@h", `has scheme "nats": use kafka://host:port`},
		{"kafka://h#x", "has a #fragment: remove it"},
		{"kafka://h/topic", "has a path: Kafka URLs name brokers only; put options in the query string"},
		{"kafka://%zz:" + pw + "@h", "has a badly percent-encoded user name"},
		{"kafka://u:%zz" + pw + "@h", "has a badly percent-encoded password"},
		{"kafka://:" + pw + "@h", "has credentials without a user name before the @"},
		{"kafka://u:" + pw + "@", "has no host: use kafka://host:port"},
		{"kafka://a,,b", "has an empty entry in its host list"},
		{"kafka://h?a=%zz", "has a query string that does not parse"},
		{"kafka://h?topic=x", `has unknown option "topic": use one of tls, route, n`},
		{"kafka://h?n=1&n=2", `has option "n" 2 times: give it once`},
	} {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			_, err := SplitHostList(tc.url, testForm)
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), tc.text), "%q starts with %q", err, tc.text)
			require.NotContains(t, err.Error(), pw)
		})
	}
}

func TestHostPort(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"h": "h:4222", "h:1": "h:1", "[::1]": "[::1]:4222", "[::1]:5": "[::1]:5", "10.0.0.1:65535": "10.0.0.1:65535",
	} {
		got, err := HostPort(in, "4222")
		require.NoError(t, err, in)
		require.Equal(t, want, got)
	}
	for in, text := range map[string]string{
		"":          "has an empty entry",
		"h:x":       `has host "h:x" whose port is not a number from 1 to 65535`,
		"h:0":       "whose port is not a number",
		"h:65536":   "whose port is not a number",
		"::1":       "write an IPv6 address in brackets, such as [::1]:4222",
		"[::1":      "that is not host:port",
		":4222":     "without a host name",
		"a b:1":     "that is not a host name or address",
		"u@h:1":     "that is not a host name or address",
		"h%2F:4222": "that is not a host name or address",
	} {
		_, err := HostPort(in, "4222")
		require.ErrorContains(t, err, text, in)
	}
}

func FuzzSplitHostList(f *testing.F) {
	for _, s := range []string{
		"kafka://127.0.0.1:9092", "kafka://u:p@a:1,b:2?route=t", "kafka://[::1]:9092?tls=true",
		"kafka://:@", "kafka://a,,b", "kafka://h?%zz", "kafka://[::1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := SplitHostList(raw, testForm)
		if err != nil {
			// As the sinks return it.
			configtest.RequireHostListError(t, raw, &outbox.ConfigError{Field: "URL", Err: err})
			return
		}
		require.NotEmpty(t, p.Hosts)
		for _, h := range p.Hosts {
			again, err := HostPort(h, "1")
			require.NoError(t, err, "a checked host:port checks again")
			require.Equal(t, h, again)
		}
	})
}
