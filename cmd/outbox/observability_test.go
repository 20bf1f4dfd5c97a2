package main_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
)

// obsLogValue waits for the JSON log line with msg and returns its key.
func obsLogValue(t *testing.T, p *process, msg, key string) string {
	t.Helper()
	var val string
	testutil.WaitFor(t, 30*time.Second, "log line "+msg, func() bool {
		require.False(t, p.exited(), "relay exited early; stderr:\n%s", p.stderr.String())
		for _, line := range strings.Split(p.stderr.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
				val = fmt.Sprint(rec[key])
				return true
			}
		}
		return false
	})
	return val
}

func obsGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// obsHasSeries reports whether body has the exposition line "series value".
func obsHasSeries(body, series string, value string) bool {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ` + regexp.QuoteMeta(value) + `$`)
	return re.MatchString(body)
}

// alertServer records the alert webhook's requests.
type alertServer struct {
	*httptest.Server
	mu     sync.Mutex
	alerts []map[string]any
	paths  []string
}

func newObsAlertServer(t *testing.T) *alertServer {
	t.Helper()
	s := &alertServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a map[string]any
		_ = json.NewDecoder(r.Body).Decode(&a)
		s.mu.Lock()
		s.alerts = append(s.alerts, a)
		s.paths = append(s.paths, r.URL.RequestURI())
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *alertServer) snapshot() ([]map[string]any, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.alerts...), append([]string(nil), s.paths...)
}

func TestRelayMetricsAndAlertWebhook(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.writeN(t, 5)
	flaky := b.write(t, outbox.Message{EventType: "order.flaky", Payload: map[string]int{"n": 6}})[0]
	// The sink: a webhook that fails order.flaky retryably, forever.
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("ce-type") == "order.flaky" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(sink.Close)
	alerts := newObsAlertServer(t)
	const dbPassword, alertPassword, alertToken = "MetricsDbPassw0rd", "AlertPassw0rd", "AlertT0ken"
	alertURL := strings.Replace(alerts.URL, "http://", "http://ops:"+alertPassword+"@", 1) + "/hook?token=" + alertToken

	p := start(t, []string{"OUTBOX_ALERT_WEBHOOK=" + alertURL},
		"--database-url", withPassword(t, dbPassword), "--schema", b.schema, "--log-format", "json",
		"relay", "--sink", sink.URL, "--metrics-addr", "127.0.0.1:0", "--poll-interval", "50ms",
		"--max-attempts", "2", "--backoff-base", "10ms", "--backoff-max", "20ms")
	addr := obsLogValue(t, p, "serving metrics", "addr")
	metrics := "http://" + addr + "/metrics"

	var body string
	s := b.schema
	testutil.WaitFor(t, 30*time.Second, "the metrics to show every event settled", func() bool {
		require.False(t, p.exited(), "relay exited early; stderr:\n%s", p.stderr.String())
		code, text := obsGet(t, metrics)
		require.Equal(t, http.StatusOK, code)
		body = text
		// The table gauges are sampled every 5s: wait for a sample taken
		// after the last outcome.
		return obsHasSeries(body, fmt.Sprintf(`outbox_published_total{schema=%q,sink="webhook"}`, s), "5") &&
			obsHasSeries(body, fmt.Sprintf(`outbox_events{schema=%q,status="failed"}`, s), "1") &&
			obsHasSeries(body, fmt.Sprintf(`outbox_events{schema=%q,status="pending"}`, s), "0")
	})
	for series, value := range map[string]string{
		fmt.Sprintf(`outbox_events{schema=%q,status="processing"}`, s):                           "0",
		fmt.Sprintf(`outbox_oldest_pending_age_seconds{schema=%q}`, s):                           "0",
		fmt.Sprintf(`outbox_publish_errors_total{kind="retryable",schema=%q,sink="webhook"}`, s): "2",
		fmt.Sprintf(`outbox_publish_errors_total{kind="permanent",schema=%q,sink="webhook"}`, s): "0",
		fmt.Sprintf(`outbox_retries_total{schema=%q,sink="webhook"}`, s):                         "1",
		fmt.Sprintf(`outbox_dead_lettered_total{schema=%q,sink="webhook"}`, s):                   "1",
		fmt.Sprintf(`outbox_commit_to_publish_seconds_count{schema=%q,sink="webhook"}`, s):       "5",
		fmt.Sprintf(`outbox_relay_up{schema=%q,sink="webhook"}`, s):                              "1",
	} {
		require.True(t, obsHasSeries(body, series, value), "want %s %s in:\n%s", series, value, body)
	}
	for _, name := range []string{"outbox_claim_duration_seconds_bucket", "outbox_publish_duration_seconds_bucket",
		"outbox_mark_duration_seconds_bucket", "outbox_batch_size_bucket", "go_goroutines", "process_resident_memory_bytes"} {
		require.Regexp(t, `(?m)^`+name+`[{ ]`, body)
	}
	code, health := obsGet(t, "http://"+addr+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", health)

	// The dead letter went to the alert webhook, credentials and all.
	testutil.WaitFor(t, 30*time.Second, "the dead-letter alert", func() bool {
		a, _ := alerts.snapshot()
		return len(a) == 1
	})
	got, paths := alerts.snapshot()
	require.Equal(t, "/hook?token="+alertToken, paths[0])
	require.Equal(t, "outbox.dead_letter", got[0]["kind"])
	require.Equal(t, b.schema, got[0]["schema"])
	require.EqualValues(t, 1, got[0]["count"])
	event := got[0]["events"].([]any)[0].(map[string]any)
	require.EqualValues(t, flaky, event["id"])
	require.Equal(t, "order.flaky", event["type"])
	require.EqualValues(t, 2, event["attempts"])
	require.Contains(t, event["last_error"], "503")

	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), "stderr:\n%s", p.stderr.String())
	logs := p.stderr.String()
	for _, secret := range []string{dbPassword, alertPassword, alertToken} {
		require.NotContains(t, logs, secret)
	}
	require.Len(t, ids, 5)
	// The metrics server stopped with the relay.
	resp, err := http.Get(metrics)
	if err == nil {
		_ = resp.Body.Close()
	}
	require.Error(t, err)
}

// otlpCollector is an OTLP/HTTP trace receiver.
type otlpCollector struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
	names []string // service.name of each span's resource
}

func newOTLPCollector(t *testing.T) *otlpCollector {
	t.Helper()
	c := &otlpCollector{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					c.spans = append(c.spans, sp)
					c.names = append(c.names, service)
				}
			}
		}
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.Close)
	return c
}

func TestRelayOpenTelemetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const traceID, spanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	id := b.write(t, outbox.Message{EventType: "order.created", Payload: map[string]int{"n": 1},
		Headers: map[string]string{"traceparent": "00-" + traceID + "-" + spanID + "-01"}})[0]
	c := newOTLPCollector(t)

	// The exporter's standard variable alone turns tracing on.
	p := start(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + c.URL, "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SERVICE_NAME=relay-under-test"},
		"--database-url", testutil.DatabaseURL(), "--schema", b.schema, "relay", "--sink", "stdout:", "--poll-interval", "50ms")
	var span *tracepb.Span
	var service string
	testutil.WaitFor(t, 30*time.Second, "the publish span at the collector", func() bool {
		require.False(t, p.exited(), "relay exited early; stderr:\n%s", p.stderr.String())
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, sp := range c.spans {
			// stdout is no messaging system and has no destination: the
			// span is named after the operation alone.
			if sp.GetName() == "send" {
				span, service = sp, c.names[i]
				return true
			}
		}
		return false
	})
	require.Equal(t, "relay-under-test", service)
	require.Equal(t, tracepb.Span_SPAN_KIND_PRODUCER, span.GetKind())
	require.Len(t, span.GetLinks(), 1)
	require.Equal(t, traceID, hex.EncodeToString(span.GetLinks()[0].GetTraceId()))
	require.Equal(t, spanID, hex.EncodeToString(span.GetLinks()[0].GetSpanId()))
	attrs := map[string]string{}
	for _, kv := range span.GetAttributes() {
		attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	require.Equal(t, fmt.Sprint(id), attrs["messaging.message.id"])
	require.NotContains(t, attrs, "messaging.system")
	require.NotContains(t, attrs, "messaging.destination.name")

	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), "stderr:\n%s", p.stderr.String())
	// The sink printed the publish span's context, not the writer's.
	var printed struct {
		ID      int64             `json:"id"`
		Headers map[string]string `json:"headers"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(p.stdout.String())), &printed), "stdout: %s", p.stdout.String())
	require.Equal(t, id, printed.ID)
	want := "00-" + hex.EncodeToString(span.GetTraceId()) + "-" + hex.EncodeToString(span.GetSpanId()) + "-01"
	require.Equal(t, want, printed.Headers["traceparent"])
	// The row keeps the writer's.
	require.Equal(t, "00-"+traceID+"-"+spanID+"-01", b.event(t, id).Headers["traceparent"])
}

// --otel=false wins over an OTLP endpoint in the environment.
func TestRelayOpenTelemetryFlagOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const writerTrace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	id := b.write(t, outbox.Message{EventType: "order.created", Payload: map[string]int{"n": 1},
		Headers: map[string]string{"traceparent": writerTrace}})[0]
	c := newOTLPCollector(t)

	p := start(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + c.URL, "OTEL_BSP_SCHEDULE_DELAY=50"},
		"--database-url", testutil.DatabaseURL(), "--schema", b.schema, "relay", "--sink", "stdout:",
		"--poll-interval", "50ms", "--otel=false")
	testutil.WaitFor(t, 30*time.Second, "the event published", func() bool {
		require.False(t, p.exited(), "relay exited early; stderr:\n%s", p.stderr.String())
		return b.event(t, id).Status == outbox.StatusProcessed
	})
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), "stderr:\n%s", p.stderr.String())
	var printed struct {
		Headers map[string]string `json:"headers"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(p.stdout.String())), &printed), "stdout: %s", p.stdout.String())
	require.Equal(t, writerTrace, printed.Headers["traceparent"], "no publish span replaced the writer's context")
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Empty(t, c.spans, "nothing is exported with --otel=false")
}

func TestObservabilityFlagErrors(t *testing.T) {
	t.Parallel()
	relay := []string{"--database-url", testutil.DatabaseURL(), "relay", "--sink", "stdout:"}
	tests := []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"metrics addr without port", nil, append(relay, "--metrics-addr", "localhost"),
			[]string{`invalid --metrics-addr "localhost": use host:port or :port, such as :9464`}},
		{"metrics port out of range", nil, append(relay, "--metrics-addr", ":99999"), []string{`invalid --metrics-addr ":99999"`}},
		{"metrics port not a number", nil, append(relay, "--metrics-addr", ":http"), []string{`invalid --metrics-addr ":http"`}},
		{"alert webhook scheme", nil, append(relay, "--alert-webhook", "ftp://ops:Secr3tAlert@alerts.example.com/x"),
			[]string{`invalid --alert-webhook: has scheme "ftp": use an http:// or https:// URL`}},
		{"alert webhook from env", []string{"OUTBOX_ALERT_WEBHOOK=alerts.example.com/Secr3tAlert"}, relay,
			[]string{"invalid --alert-webhook:"}},
		{"alert webhook no host", nil, append(relay, "--alert-webhook", "https:///Secr3tAlert"), []string{"invalid --alert-webhook: has no host"}},
		{"otlp endpoint without scheme", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=collector:4318"}, relay,
			[]string{"invalid $OTEL_EXPORTER_OTLP_ENDPOINT: use an http:// or https:// URL"}},
		{"otlp traces endpoint", []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://:Secr3tAlert@"}, relay,
			[]string{"invalid $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, tc.env, tc.args...)
			requireFail(t, res, 2, tc.want...)
			require.NotContains(t, res.stderr, "Secr3tAlert")
		})
	}
}

func TestMetricsAddrInUse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	res := outboxCmd(t, b.schema, "relay", "--sink", "stdout:", "--metrics-addr", ln.Addr().String())
	requireFail(t, res, 1, "--metrics-addr "+ln.Addr().String(), "address already in use", "is another process serving it?")
}

func TestRelaySinkDownMetricsAndLogs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.writeN(t, 10)
	// A port nothing listens on until the receiver starts.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	p := start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", b.schema, "--log-format", "json",
		"relay", "--sink", "http://"+addr+"/hook", "--metrics-addr", "127.0.0.1:0", "--poll-interval", "50ms",
		"--max-attempts", "2", "--backoff-base", "10ms", "--backoff-max", "20ms",
		"--probe-interval", "50ms", "--probe-interval-max", "200ms")
	metrics := "http://" + obsLogValue(t, p, "serving metrics", "addr") + "/metrics"
	series := func(name, labels string) string {
		return fmt.Sprintf(`%s{schema=%q,sink="webhook"%s}`, name, b.schema, labels)
	}
	testutil.WaitFor(t, 30*time.Second, "the sink reported down", func() bool {
		require.False(t, p.exited(), "relay exited early; stderr:\n%s", p.stderr.String())
		_, body := obsGet(t, metrics)
		return obsHasSeries(body, series("outbox_sink_up", ""), "0") &&
			obsHasSeries(body, series("outbox_sink_circuit_state", `,state="closed"`), "0") &&
			strings.Contains(p.stderr.String(), `"msg":"publishes failing"`)
	})
	require.Contains(t, p.stderr.String(), `"msg":"sink unreachable: circuit open;`)
	require.Contains(t, p.stderr.String(), "connection refused")
	readyz := strings.TrimSuffix(metrics, "/metrics") + "/readyz"
	code, body := obsGet(t, readyz)
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Contains(t, body, "sink: unreachable (circuit ")
	require.Contains(t, body, "database: ok\n")
	s := b.stats(t)
	require.Zero(t, s.Failed, "two attempts would have dead-lettered everything by now")
	for _, id := range ids {
		require.Zero(t, b.event(t, id).Attempts)
	}

	recv, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(recv)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-served
	})
	testutil.WaitFor(t, 30*time.Second, "every event delivered and the sink reported up", func() bool {
		_, body := obsGet(t, metrics)
		return b.stats(t).Processed == int64(len(ids)) && obsHasSeries(body, series("outbox_sink_up", ""), "1") &&
			obsHasSeries(body, series("outbox_sink_circuit_state", `,state="closed"`), "1")
	})
	require.Contains(t, p.stderr.String(), `"msg":"sink reachable again: circuit closed; claiming resumes"`)
	code, body = obsGet(t, readyz)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "sink: ok\n")
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), "stderr:\n%s", p.stderr.String())
}
