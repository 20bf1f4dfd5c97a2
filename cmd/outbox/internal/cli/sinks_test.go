package cli

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/route"
)

// TestDescribeSinkRedactsEveryScheme checks that the sink's name in logs
// and metrics never holds a credential, for every scheme, even where the
// redactor knows of no secret.
func TestDescribeSinkRedactsEveryScheme(t *testing.T) {
	t.Parallel()
	const pw, token = "Pa55w0rdXyz", "T0kenAbcDef"
	tests := []struct{ raw, want string }{
		{"stdout:", "stdout:"},
		{"stdout", "stdout:"},
		{"http://u:" + pw + "@hooks.example.com/t/" + token + "?sig=" + token, "http://hooks.example.com/…"},
		{"https://hooks.example.com/" + token, "https://hooks.example.com/…"},
		{"https://hooks.example.com", "https://hooks.example.com"},
		{"nats://u:" + pw + "@127.0.0.1:4222?stream=S", "nats://127.0.0.1:4222?…"},
		{"nats://" + token + "@a:4222,b:4222", "nats://a:4222,b:4222"},
		{"kafka://u:" + pw + "@b1:9092,b2:9092?sasl=plain", "kafka://b1:9092,b2:9092?…"},
		{"amqp://guest:" + pw + "@rabbit:5672/prod?exchange=events", "amqp://rabbit:5672/prod?…"},
		{"amqps://u:p%40" + pw + "@rabbit/%2F", "amqps://rabbit/%2F"},
		{"redis://:" + pw + "@127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"rediss://user:" + pw + "@redis:6380/2?maxlen=10&password=" + pw, "rediss://redis:6380/2?…"},
		{"mqtt://relay:" + pw + "@127.0.0.1:1883?client_id=x", "mqtt://127.0.0.1:1883?…"},
		{"mqtts://relay:" + pw + "@broker#frag", "mqtts://broker"},
		{"nats://u:pa@ss" + pw + "@host:4222", "nats://host:4222"},
	}
	for _, tt := range tests {
		got := describeSink(tt.raw, &redactor{})
		require.Equal(t, tt.want, got, tt.raw)
		require.NotContains(t, got, pw)
		require.NotContains(t, got, token)
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[sinkSchemeOf(tt.raw)] = true
	}
	for _, s := range sinkSchemes {
		require.True(t, covered[s.name], "describeSink is not tested for %s://", s.name)
	}
}

func TestRegisterSinkSecrets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw       string
		tokenUser bool
		secrets   []string
		kept      []string
	}{
		{"amqp://guest:p%40ss@rabbit/", false, []string{"p%40ss", "p@ss"}, []string{"guest", "rabbit"}},
		{"nats://S3CRET@host:4222", true, []string{"S3CRET"}, []string{"host"}},
		{"mqtt://user@host", false, nil, []string{"user"}},
		{"redis://:pw1@host/0?password=pw2&maxlen=100", false, []string{"pw1", "pw2"}, []string{"100"}},
		{"kafka://u:a@b@host:9092", false, []string{"a@b"}, []string{"host"}},
		{"stdout:", false, nil, []string{"stdout"}},
	}
	for _, tt := range tests {
		r := &redactor{}
		registerSinkSecrets(r, tt.raw, tt.tokenUser)
		for _, s := range tt.secrets {
			require.Equal(t, "<"+redactMask+">", r.String("<"+s+">"), "%s: %s", tt.raw, s)
		}
		for _, s := range tt.kept {
			require.Equal(t, s, r.String(s), "%s: %s is no secret", tt.raw, s)
		}
	}
}

func TestOpenSinkUsageErrors(t *testing.T) {
	t.Parallel()
	r, err := route.New("")
	require.NoError(t, err)
	tests := []struct {
		name string
		raw  string
		o    sinkOptions
		want string
	}{
		{"unknown scheme", "kafkaa://b:9092", sinkOptions{}, `unknown sink scheme "kafkaa": use one of stdout, http, https, nats, kafka, amqp, amqps, redis, rediss, mqtt, mqtts`},
		{"no scheme", "//host", sinkOptions{}, "invalid --sink: it has no URL scheme"},
		{"mqtt alias", "tcp://127.0.0.1:1883", sinkOptions{}, `unknown sink scheme "tcp"`},
		{"route for stdout", "stdout:", sinkOptions{given: map[sinkOption]string{optRoute: "--route"}},
			"--route does not apply to the stdout sink: routing applies to nats, kafka, amqp, amqps, redis, rediss, mqtt, mqtts; remove it"},
		{"route for webhook", "https://h/x", sinkOptions{given: map[sinkOption]string{optRoute: "routing.default (c.yaml:3)"}},
			"routing.default (c.yaml:3) does not apply to the https sink"},
		{"secret for a broker", "nats://127.0.0.1:4222", sinkOptions{given: map[sinkOption]string{optWebhook: "--webhook-secret"}},
			"--webhook-secret does not apply to the nats sink: the webhook settings applies to http, https"},
		{"source for stdout", "stdout:", sinkOptions{given: map[sinkOption]string{optSource: "--source"}},
			"--source does not apply to the stdout sink"},
		{"route twice", "redis://127.0.0.1:6379/0?route=x", sinkOptions{Router: r, given: map[sinkOption]string{optRoute: "--route"}},
			"--route and the --sink URL's route option both set the route: keep one"},
		{"source twice", "mqtt://127.0.0.1:1883?source=/a", sinkOptions{Source: "/b", given: map[sinkOption]string{optSource: "--source"}},
			"--source and the --sink URL's source option both set the source: keep one"},
		{"bad broker URL", "amqp://guest:Secr3t@rabbit/?exchange=x&bogus=1", sinkOptions{}, `invalid --sink: amqp://rabbit/: unknown option "bogus"`},
		{"bad nats option", "nats://127.0.0.1:4222?ack_timeout=soon", sinkOptions{}, "invalid --sink:"},
		{"kafka user without sasl", "kafka://u:Secr3t@127.0.0.1:9092", sinkOptions{}, "invalid --sink:"},
		{"webhook TLS for a broker", "redis://127.0.0.1:6379/0", sinkOptions{given: map[sinkOption]string{optWebhookTLS: "--webhook-ca"}},
			"--webhook-ca does not apply to the redis sink: it is for https webhooks; a broker sink takes its CA and client certificate in the --sink URL"},
		{"webhook TLS over http", "http://h/x", sinkOptions{given: map[sinkOption]string{optWebhookTLS: "sink.webhook_ca (c.yaml:4)"}},
			"sink.webhook_ca (c.yaml:4) needs an https:// --sink: plain http has no TLS"},
		{"webhook CA missing", "https://u:Secr3t@h/x", sinkOptions{WebhookCA: "/nonexistent/ca.pem", given: map[sinkOption]string{optWebhookTLS: "--webhook-ca"}},
			"invalid --webhook-ca: cannot read the CA file: open /nonexistent/ca.pem"},
		{"webhook cert from the file without a key", "https://h/x", sinkOptions{WebhookCert: "/c.pem", name: func(flag string) string {
			if flag == "webhook-cert" {
				return "sink.webhook_cert (c.yaml:5)"
			}
			return "--" + flag
		}}, "invalid sink.webhook_cert (c.yaml:5): is set without --webhook-key"},
		{"rediss CA missing", "rediss://:Secr3t@h/0?tls_ca=/nonexistent/ca.pem", sinkOptions{}, "invalid --sink: invalid URL option tls_ca: cannot read the CA file"},
		{"mqtt tls option", "mqtt://u:Secr3t@h?tls_ca=/ca.pem", sinkOptions{}, "invalid --sink: invalid URL option tls_ca: is for TLS but mqtt://h is a plain connection: use mqtts://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sink, err := openSink(context.Background(), tt.raw, tt.o, &redactor{})
			require.Nil(t, sink)
			var ue *usageError
			require.True(t, errors.As(err, &ue), "a usage error: %v", err)
			require.Contains(t, err.Error(), tt.want)
			require.NotContains(t, err.Error(), "Secr3t")
			require.False(t, strings.Contains(err.Error(), "\n"))
		})
	}
}
