package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxalert"
	"github.com/outboxkit/outbox/outboxotel"
	"github.com/outboxkit/outbox/outboxprom"
)

// Environment variables the relay's observability flags read.
const (
	EnvAlertWebhook = "OUTBOX_ALERT_WEBHOOK"
	// The OpenTelemetry exporter's own variables: either one enables
	// tracing as --otel does.
	EnvOTLPEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvOTLPTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
)

// observability is the relay's --metrics-addr, --alert-webhook and --otel:
// what they ask for, checked before the relay connects.
type observability struct {
	metricsAddr  string
	alertWebhook string
	otel         bool
	// target is what publish spans name; the relay command sets it from
	// the sink it opened.
	target tracingTarget
}

func (o *observability) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on /metrics, liveness on /healthz and readiness on /readyz at this host:port, such as :9464")
	f.StringVar(&o.alertWebhook, "alert-webhook", "", "POST dead-lettered events to this URL, at most once per minute with a summary (default $"+EnvAlertWebhook+")")
	f.BoolVar(&o.otel, "otel", false, "trace each publish with OpenTelemetry, exported over OTLP/HTTP as the OTEL_EXPORTER_OTLP_* variables say (on when $"+EnvOTLPEndpoint+" or $"+EnvOTLPTracesEndpoint+" is set; --otel=false turns it off)")
}

// check validates the flags and registers the secrets they hold; its
// errors are usage errors that never quote a URL. otelGiven says whether
// the operator set --otel (or the file's otel key): only when they did not
// does an OTLP endpoint in the environment turn tracing on.
func (o *observability) check(r *redactor, otelGiven bool) error {
	if o.metricsAddr != "" {
		host, port, err := net.SplitHostPort(o.metricsAddr)
		n, perr := strconv.Atoi(port)
		if err != nil || perr != nil || n < 0 || n > 65535 || strings.ContainsAny(host, "/ ") {
			return usagef("invalid --metrics-addr %q: use host:port or :port, such as :9464 or 127.0.0.1:9464", o.metricsAddr)
		}
	}
	if o.alertWebhook == "" {
		o.alertWebhook = os.Getenv(EnvAlertWebhook)
	}
	if o.alertWebhook != "" {
		registerURLSecrets(r, o.alertWebhook)
		if err := (outboxalert.Config{URL: o.alertWebhook}).Validate(); err != nil {
			var ce *outbox.ConfigError
			if errors.As(err, &ce) {
				err = ce.Err
			}
			return usagef("invalid --alert-webhook: %v", err)
		}
	}
	for _, env := range []string{EnvOTLPEndpoint, EnvOTLPTracesEndpoint} {
		raw := os.Getenv(env)
		if raw == "" {
			continue
		}
		if !otelGiven {
			o.otel = true
		}
		registerURLSecrets(r, raw)
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usagef("invalid $%s: use an http:// or https:// URL of an OTLP/HTTP collector, such as http://localhost:4318", env)
		}
	}
	return nil
}

// registerURLSecrets masks the credentials a URL may hold: its password,
// query values and, for webhooks whose path is the secret, the URL itself.
func registerURLSecrets(r *redactor, raw string) {
	r.add(raw)
	u, err := url.Parse(raw)
	if err != nil {
		return
	}
	if pw, ok := u.User.Password(); ok {
		r.add(pw)
	}
	for _, vs := range u.Query() {
		r.add(vs...)
	}
}

// observers are the running metrics server, alerter and tracer provider of
// one relay.
type observers struct {
	log     *slog.Logger
	redact  *redactor
	metrics *outboxprom.Metrics
	server  *http.Server
	served  chan struct{}
	alerter *outboxalert.Alerter
	tracer  *sdktrace.TracerProvider
	// state is the relay /readyz reports on.
	state *relayState
}

// setRelay hands the built relay to /readyz.
func (obs *observers) setRelay(r *outbox.Relay) {
	if obs.state != nil {
		obs.state.relay.Store(r)
	}
}

// startObservers starts what o asks for and adds its hooks to cfg. stop
// undoes it, also after an error.
func (a *app) startObservers(ctx context.Context, o *observability, db outbox.Database, cfg *outbox.RelayConfig, sinkURL string) (*observers, error) {
	obs := &observers{log: a.logger, redact: a.redact}
	sink := sinkLabel(sinkURL)
	if o.metricsAddr != "" {
		if err := obs.serveMetrics(ctx, o.metricsAddr, db, cfg, sink); err != nil {
			obs.stop()
			return nil, err
		}
		cfg.Hooks = append(cfg.Hooks, obs.metrics)
	}
	if err := a.startAlertsAndTracing(ctx, o, obs, cfg); err != nil {
		obs.stop()
		return nil, err
	}
	return obs, nil
}

// serveMetrics listens on addr and serves /metrics from a registry of the
// relay's own: outboxprom's series plus the Go runtime and process ones.
func (obs *observers) serveMetrics(ctx context.Context, addr string, db outbox.Database, cfg *outbox.RelayConfig, sink string) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mgr := outbox.NewManager(db, outbox.ManagerConfig{Schema: cfg.Schema})
	m, err := outboxprom.New(outboxprom.Config{Registerer: reg, Schema: cfg.Schema, Sink: sink, Logger: obs.log,
		Manager: mgr})
	if err != nil {
		return err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-addr %s: %w (is another process serving it?)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(obs.log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	obs.state = &relayState{stopping: ctx}
	ready := &readiness{redact: obs.redact}
	ready.add("relay", obs.state.check)
	ready.add("database", databaseCheck(mgr))
	ready.add("sink", obs.state.sinkCheck)
	mux.Handle("GET /readyz", ready)
	obs.metrics = m
	obs.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(obs.log.Handler(), slog.LevelWarn)}
	obs.served = make(chan struct{})
	go func() {
		defer close(obs.served)
		if err := obs.server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			obs.log.Error("the metrics server stopped", "error", err.Error())
		}
	}()
	m.SetRelayUp(true)
	obs.log.Info("serving metrics", "addr", ln.Addr().String(), "path", "/metrics")
	return nil
}

// tracerProvider exports spans over OTLP/HTTP, configured by the standard
// OTEL_EXPORTER_OTLP_* and OTEL_SERVICE_NAME variables; the service is
// outbox-relay unless they name another. OpenTelemetry's own errors go to
// the relay's log, where secrets are masked.
func (a *app) tracerProvider(ctx context.Context) (*sdktrace.TracerProvider, error) {
	otel.SetLogger(logr.FromSlogHandler(a.logger.Handler()))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		a.logger.Warn("opentelemetry", "error", err.Error())
	}))
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("--otel: create the OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName("outbox-relay")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		a.logger.Warn("opentelemetry resource incomplete", "error", err.Error())
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// stop shuts everything down: the metrics server at once, then the alerter
// (sending what is pending) and the tracer (flushing spans), each within a
// few seconds.
func (obs *observers) stop() {
	if obs == nil {
		return
	}
	if obs.metrics != nil {
		obs.metrics.SetRelayUp(false)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if obs.server != nil {
		if err := obs.server.Shutdown(ctx); err != nil {
			_ = obs.server.Close()
		}
		<-obs.served
	}
	if obs.alerter != nil {
		if err := obs.alerter.Close(ctx); err != nil {
			obs.log.Warn("pending alerts were not sent before shutdown", "error", err.Error())
		}
	}
	if obs.tracer != nil {
		if err := obs.tracer.Shutdown(ctx); err != nil {
			obs.log.Warn("flushing spans failed", "error", err.Error())
		}
	}
}

// sinkLabel names the sink in metrics and spans by its URL's scheme; an
// HTTP sink is a webhook.
func sinkLabel(sinkURL string) string {
	scheme, _, found := strings.Cut(sinkURL, ":")
	if !found {
		scheme = sinkURL
	}
	switch scheme = strings.ToLower(scheme); scheme {
	case "http", "https":
		return "webhook"
	default:
		return scheme
	}
}

// tenantObservers are the running metrics server, alerter and tracer
// provider of a tenant relay: one registry for every database, whose
// series carry schema and database labels.
type tenantObservers struct {
	*observers
	reg     *prometheus.Registry
	mu      sync.Mutex // guards metrics: several databases start at once
	metrics []*outboxprom.TenantMetrics
	mode    outboxprom.TenantMode
	sink    string
}

// startTenantObservers starts what o asks for, for Tenants: the alerter's
// and the tracer's hooks go into cfg (every tenant's relay shares them;
// events carry their tenant), the metrics come per database from
// tenantMetrics, and /readyz checks each of dbs. stop undoes it, also
// after an error.
func (a *app) startTenantObservers(ctx context.Context, o *observability, cfg *outbox.RelayConfig, sinkURL, mode string, dbs []tenantDatabase) (*tenantObservers, error) {
	m, _ := outboxprom.ParseTenantMode(mode) // checked with the flags
	obs := &tenantObservers{observers: &observers{log: a.logger, redact: a.redact}, mode: m, sink: sinkLabel(sinkURL)}
	if o.metricsAddr != "" {
		obs.reg = prometheus.NewRegistry()
		obs.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", o.metricsAddr)
		if err != nil {
			return nil, fmt.Errorf("--metrics-addr %s: %w (is another process serving it?)", o.metricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(obs.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn)}))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte("ok\n"))
		})
		ready := &readiness{redact: a.redact}
		ready.add("relay", func(context.Context) error {
			if ctx.Err() != nil {
				return errors.New("stopping")
			}
			return nil
		})
		// Each database's reachability; with several, one that is down
		// is reported but leaves the relay ready: it serves the others.
		for _, d := range dbs {
			if d.ready != nil {
				ready.checks = append(ready.checks, readyCheck{name: "database " + d.displayLabel(), check: d.ready.check(), soft: len(dbs) > 1})
			}
		}
		mux.Handle("GET /readyz", ready)
		obs.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn)}
		obs.served = make(chan struct{})
		go func() {
			defer close(obs.served)
			if err := obs.server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.logger.Error("the metrics server stopped", "error", err.Error())
			}
		}()
		a.logger.Info("serving metrics", "addr", ln.Addr().String(), "path", "/metrics", "tenant_metrics", string(m))
	}
	if err := a.startAlertsAndTracing(ctx, o, obs.observers, cfg); err != nil {
		obs.stop()
		return nil, err
	}
	return obs, nil
}

// tenantMetrics returns the observers of one database's tenants: their
// metrics, labelled database (host:port/name) and schema, or none without
// --metrics-addr.
func (obs *tenantObservers) tenantMetrics(db outbox.Database, label string) ([]outbox.TenantObserver, error) {
	if obs == nil || obs.reg == nil {
		return nil, nil
	}
	tm, err := outboxprom.NewTenants(outboxprom.TenantConfig{Registerer: obs.reg, DB: db, Database: label, Sink: obs.sink,
		Mode: obs.mode, Logger: obs.log})
	if err != nil {
		return nil, err
	}
	tm.SetRelayUp(true)
	obs.mu.Lock()
	obs.metrics = append(obs.metrics, tm)
	obs.mu.Unlock()
	return []outbox.TenantObserver{tm}, nil
}

// stop marks the relays down and shuts the observers down.
func (obs *tenantObservers) stop() {
	if obs == nil {
		return
	}
	obs.mu.Lock()
	for _, tm := range obs.metrics {
		tm.SetRelayUp(false)
	}
	obs.mu.Unlock()
	obs.observers.stop()
}

// startAlertsAndTracing adds the --alert-webhook alerter and the --otel
// tracer to obs and to cfg's hooks, for one relay and for tenants alike.
func (a *app) startAlertsAndTracing(ctx context.Context, o *observability, obs *observers, cfg *outbox.RelayConfig) error {
	if o.alertWebhook != "" {
		alerter, err := outboxalert.New(outboxalert.Config{URL: o.alertWebhook, Schema: cfg.Schema, RelayID: cfg.RelayID, Logger: a.logger})
		if err != nil {
			return usagef("invalid --alert-webhook: %v", err)
		}
		obs.alerter = alerter
		cfg.Hooks = append(cfg.Hooks, alerter)
	}
	if o.otel {
		tp, err := a.tracerProvider(ctx)
		if err != nil {
			return err
		}
		obs.tracer = tp
		tc := o.target.config()
		tc.TracerProvider = tp
		cfg.Hooks = append(cfg.Hooks, outboxotel.New(tc))
	}
	return nil
}
