package webhooksink_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/configtest"
	"github.com/outboxkit/outbox/sink/webhooksink"
)

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	c := webhooksink.Config{URL: "https://x"}.WithDefaults()
	require.Equal(t, webhooksink.SourceDefault, c.Source)
	require.Equal(t, webhooksink.TimeoutDefault, c.Timeout)
	require.Equal(t, webhooksink.ConcurrencyDefault, c.Concurrency)
	require.Equal(t, webhooksink.UserAgentDefault, c.UserAgent)

	set := webhooksink.Config{Source: "/s", Timeout: time.Second, Concurrency: 2, UserAgent: "ua"}
	require.Equal(t, set, set.WithDefaults(), "set fields are kept")
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	const pw = "hunter2-password"
	for _, tc := range []struct {
		name  string
		cfg   webhooksink.Config
		field string
		text  string
	}{
		{"EmptyURL", webhooksink.Config{}, "URL", "invalid URL: is empty: set the endpoint"},
		{"Unparsable", webhooksink.Config{URL: "http://user:" + pw + "@[::1"}, "URL", "invalid URL: does not parse (missing ']' in host): use an absolute http:// or https:// URL"},
		{"BadPort", webhooksink.Config{URL: "http://user:" + pw + "@host:port/"}, "URL", "does not parse"},
		{"Scheme", webhooksink.Config{URL: "ftp://user:" + pw + "@host/x"}, "URL", `invalid URL: ftp://host/… has scheme "ftp": use an absolute http:// or https:// URL`},
		{"NoScheme", webhooksink.Config{URL: "hooks.example.com/x"}, "URL", `has scheme ""`},
		{"NoHost", webhooksink.Config{URL: "https:///path"}, "URL", "has no host"},
		{"OnlyPort", webhooksink.Config{URL: "https://user:" + pw + "@:8080/"}, "URL", "has no host"},
		{"Fragment", webhooksink.Config{URL: "https://host/x#frag"}, "URL", "#fragment"},
		{"Source", webhooksink.Config{URL: "https://h", Source: " /outbox"}, "Source", "is not a URI reference"},
		{"Timeout", webhooksink.Config{URL: "https://h", Timeout: -time.Second}, "Timeout", "is -1s: use a positive duration"},
		{"Concurrency", webhooksink.Config{URL: "https://h", Concurrency: -1}, "Concurrency", "is -1: use at least 1"},
		{"UserAgent", webhooksink.Config{URL: "https://h", UserAgent: "a\nb"}, "UserAgent", "control characters"},
		{"HeaderName", webhooksink.Config{URL: "https://h", Headers: map[string]string{"Bad Name": pw}}, "Headers", `name "Bad Name" is not a valid HTTP header name`},
		{"HeaderValue", webhooksink.Config{URL: "https://h", Headers: map[string]string{"Authorization": "Bearer " + pw + "\r\nX: y"}}, "Headers", "the value of Authorization holds control characters"},
		{"OwnedContentType", webhooksink.Config{URL: "https://h", Headers: map[string]string{"content-type": "text/plain"}}, "Headers", "Content-Type is set by the sink"},
		{"OwnedCE", webhooksink.Config{URL: "https://h", Headers: map[string]string{"ce-id": "1"}}, "Headers", "Ce-Id is set by the sink"},
		{"OwnedWebhook", webhooksink.Config{URL: "https://h", Headers: map[string]string{"Webhook-Signature": "v1,x"}}, "Headers", "Webhook-Signature is set by the sink"},
		{"OwnedUserAgent", webhooksink.Config{URL: "https://h", Headers: map[string]string{"User-Agent": "x"}}, "Headers", "use Config.UserAgent"},
		{"BadWhsec", webhooksink.Config{URL: "https://h", Secret: "whsec_" + pw + "!!"}, "Secret", "starts with whsec_ but the rest is not valid standard base64"},
		{"EmptyWhsec", webhooksink.Config{URL: "https://h", Secret: "whsec_"}, "Secret", "is whsec_ with no key after it"},
		{"TLSWithClient", webhooksink.Config{URL: "https://h", TLS: &tls.Config{}, Client: &http.Client{}}, "TLS", "is set along with Client: configure TLS in the Client's transport, or drop Client"},
		{"TLSOverHTTP", webhooksink.Config{URL: "http://user:" + pw + "@h/x", TLS: &tls.Config{}}, "TLS", "is set but http://h/… is plain HTTP: use an https:// URL, or drop TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := webhooksink.New(tc.cfg)
			require.Nil(t, s)
			configtest.RequireError(t, err, tc.field, tc.text, pw)
		})
	}
}

func TestNewAcceptsGoodConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []webhooksink.Config{
		{URL: "http://localhost:8080"},
		{URL: "https://user:pass@hooks.example.com/a/b?c=d"},
		{URL: "http://[::1]:9000/x"},
		{URL: "https://h", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		{URL: "https://h", Secret: "any raw string at all"},
		{URL: "https://h", Source: "urn:example:orders", Headers: map[string]string{"Authorization": "Bearer x", "X-Api-Key": "k"}},
	} {
		s, err := webhooksink.New(cfg)
		require.NoError(t, err, "%v", cfg)
		require.NoError(t, s.Close())
	}
}

func TestSecretsAreRedactedFromPrintedConfig(t *testing.T) {
	t.Parallel()
	cfg := webhooksink.Config{
		URL:     "https://user:" + testPassword + "@hooks.example.com/hooks/" + testPathTok + "?sig=" + testPathTok,
		Secret:  testSecret,
		Headers: map[string]string{"Authorization": testToken},
	}.WithDefaults()
	s, err := webhooksink.New(cfg)
	require.NoError(t, err)
	defer s.Close()

	var logged bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logged, nil))
	log.Info("configured", slog.Any("config", cfg), slog.Any("sink", s))
	for _, out := range []string{
		fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), cfg.String(),
		fmt.Sprint(s), fmt.Sprintf("%+v", s), s.String(),
		logged.String(),
	} {
		requireNoSecrets(t, out)
		require.Contains(t, out, "hooks.example.com")
	}
	require.Equal(t, `webhooksink.Config{URL: https://hooks.example.com/…, Secret: [REDACTED], Source: "/outbox", `+
		`Timeout: 10s, Concurrency: 16, Headers: {Authorization: [REDACTED]}, UserAgent: "outbox-webhooksink"}`, cfg.String())
	require.Equal(t, "webhooksink(https://hooks.example.com/…)", s.String())
	require.Regexp(t, `"config":\{"url":"https://hooks.example.com/…","url_path_sha256":"[0-9a-f]{8}","signed":true,"source":"/outbox","timeout":10000000000,"concurrency":16,"headers":\["Authorization"\]\}`, logged.String())
}

// TestLoggedEndpointsOnOneHostDiffer: two sinks posting to one host under
// different paths log apart, by a fingerprint of the path, never the path.
func TestLoggedEndpointsOnOneHostDiffer(t *testing.T) {
	t.Parallel()
	logged := func(rawURL string) string {
		var b bytes.Buffer
		slog.New(slog.NewJSONHandler(&b, nil)).Info("sink", slog.Any("config", webhooksink.Config{URL: rawURL}.WithDefaults()))
		return b.String()
	}
	a, b := logged("https://hooks.example.com/orders/"+testPathTok), logged("https://hooks.example.com/invoices/"+testPathTok)
	require.NotEqual(t, a, b)
	for _, out := range []string{a, b} {
		require.Contains(t, out, `"url_path_sha256":"`)
		require.NotContains(t, out, testPathTok)
		require.NotContains(t, out, "orders")
	}
	require.NotContains(t, logged("https://hooks.example.com"), "url_path_sha256", "nothing to tell apart")
}

func TestCloseKeepsTheSinkUsable(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	s := newSink(t, srv, webhooksink.Config{})
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{fullEvent()}))
	require.NoError(t, s.Close())
	require.Nil(t, s.Publish(t.Context(), []outbox.Event{fullEvent()}))
	require.Equal(t, int32(2), srv.conns.Load(), "Close dropped the idle connection")
}

// FuzzNewURL checks that New never panics on a URL and never quotes the
// URL's password in an error.
func FuzzNewURL(f *testing.F) {
	for _, seed := range []string{
		"", "http://h", "https://u:p@h:1/p?q#f", "http://[::1", "http://u:pw@[::1", "ftp://u:pw@h",
		"http://u:pw@h:port", "//u:pw@h", "http:", "http://%41", "https://u:p%zz@h", "\x00", "http://h/\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		s, err := webhooksink.New(webhooksink.Config{URL: raw})
		if err == nil {
			require.NoError(t, s.Close())
			return
		}
		var ce *outbox.ConfigError
		require.True(t, errors.As(err, &ce))
		// Whatever a URL-ish string holds between "://" and "@" is
		// userinfo to a human, whether or not url.Parse agrees.
		if _, rest, ok := strings.Cut(raw, "://"); ok {
			if userinfo, _, ok := strings.Cut(rest, "@"); ok {
				if _, pw, ok := strings.Cut(userinfo, ":"); ok && len(pw) >= 4 && !strings.ContainsAny(pw, "/?#") {
					require.NotContains(t, err.Error(), pw)
				}
			}
		}
	})
}

// FuzzAttributeName checks that every header name maps to a valid
// CloudEvents attribute name or to nothing.
func FuzzAttributeName(f *testing.F) {
	for _, seed := range []string{"correlation_id", "X-Tenant-ID", "ü", "", "a.b.c", "TRACEPARENT"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		name := webhooksink.AttributeName(header)
		for _, c := range name {
			require.True(t, c >= 'a' && c <= 'z' || c >= '0' && c <= '9', "%q maps to %q", header, name)
		}
		require.Equal(t, name, webhooksink.AttributeName(name), "mapping is idempotent")
	})
}

// FuzzHeaderValues sends events with arbitrary header values, aggregate
// IDs and types through a real request and checks that the request goes
// out and every value survives percent-decoding.
func FuzzHeaderValues(f *testing.F) {
	for _, seed := range []string{"plain", "50% off", "\"quoted\"", "zoë 日本", "a\r\nb", "\x00\x7f\xff", "%41"} {
		f.Add(seed)
	}
	var (
		got  = make(chan http.Header, 1)
		srv  = newFuzzServer(f, got)
		sink = newFuzzSink(f, srv)
	)
	f.Fuzz(func(t *testing.T, value string) {
		errs := sink.Publish(t.Context(), []outbox.Event{{
			ID: 1, EventType: value, AggregateID: value, Payload: []byte(`{}`),
			Headers: map[string]string{"x": value},
		}})
		require.Nil(t, errs)
		h := <-got
		for _, name := range []string{"Ce-Type", "Ce-Subject", "Ce-X"} {
			decoded, err := url.PathUnescape(h.Get(name))
			require.NoError(t, err, "%s: %q", name, h.Get(name))
			require.Equal(t, value, decoded, "%s", name)
		}
	})
}
