// Package outboxprom exposes an outbox's health as Prometheus metrics: the
// events per status and the publisher's lag from the table, and throughput,
// errors, latencies and batch sizes from the relay.
//
// Metrics registers on the prometheus.Registerer it is given (never on the
// global default registry) and observes a relay as a hook:
//
//	reg := prometheus.NewRegistry()
//	m, err := outboxprom.New(outboxprom.Config{Registerer: reg, Manager: mgr, Sink: "nats"})
//	...
//	relay, err := outbox.NewRelay(db, outbox.RelayConfig{Sink: sink, Hooks: []outbox.Hook{m}})
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The table gauges (outbox_events, outbox_oldest_pending_age_seconds) come
// from Manager.EstimateStats, and the health gauges (outbox_table_*,
// outbox_vacuum_horizon_*: bloat and what holds back vacuum) from
// Manager.TableHealth, sampled on a scrape at most once per SampleInterval
// and cached in between, so however often Prometheus scrapes, the database
// answers a few cheap queries per interval. docs/observability.md lists
// every series and suggests alert rules.
package outboxprom

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outboxkit/outbox"
)

// Defaults; Config.WithDefaults fills zero fields with them.
const (
	// SampleIntervalDefault is how long sampled table gauges are reused.
	SampleIntervalDefault = 5 * time.Second
	// SampleTimeoutDefault bounds the statistics queries of one sample.
	SampleTimeoutDefault = 5 * time.Second
)

// Buckets of the histograms, in seconds or events.
var (
	// DurationBuckets are the buckets of the claim, publish and mark
	// duration histograms.
	DurationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	// LatencyBuckets are the buckets of outbox_commit_to_publish_seconds:
	// from milliseconds for a relay that keeps up to hours for events that
	// were retried.
	LatencyBuckets = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600}
	// BatchSizeBuckets are the buckets of outbox_batch_size.
	BatchSizeBuckets = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}
)

// Config configures Metrics.
type Config struct {
	// Registerer is where the metrics are registered. Defaults to a new
	// registry of their own, which Metrics.Handler serves. outboxprom never
	// uses Prometheus's global default registry.
	Registerer prometheus.Registerer
	// Manager, when set, feeds the table gauges outbox_events and
	// outbox_oldest_pending_age_seconds and the health gauges
	// (Manager.TableHealth). Without it only the relay's metrics exist.
	Manager *outbox.Manager
	// SampleInterval is how long one sample of the table gauges is served
	// before a scrape takes a new one. Defaults to SampleIntervalDefault.
	SampleInterval time.Duration
	// SampleTimeout bounds the statistics queries of one sample. Defaults
	// to SampleTimeoutDefault.
	SampleTimeout time.Duration
	// Schema is the value of every series' schema label: the schema of the
	// outbox table. Defaults to outbox.SchemaDefault.
	Schema string
	// Database, when set, adds a database label with this value to every
	// series: the database of the outbox when one process serves several
	// (host:port/name, never credentials). Metrics with and without it
	// cannot share a registry.
	Database string
	// Sink is the value of the relay series' sink label, such as "nats" or
	// "webhook". Metrics of relays that serve different sinks from one
	// schema need distinct values to share a registry.
	Sink string
	// Logger receives a warning when a sample fails. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	c.SampleInterval = cmp.Or(c.SampleInterval, SampleIntervalDefault)
	c.SampleTimeout = cmp.Or(c.SampleTimeout, SampleTimeoutDefault)
	c.Schema = cmp.Or(c.Schema, outbox.SchemaDefault)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// labels are the labels every series carries: schema, and database when
// set.
func (c Config) labels() prometheus.Labels {
	l := prometheus.Labels{"schema": c.Schema}
	if c.Database != "" {
		l["database"] = c.Database
	}
	return l
}

// Validate reports the first invalid field as an *outbox.ConfigError.
func (c Config) Validate() error {
	switch {
	case c.SampleInterval < 0:
		return &outbox.ConfigError{Field: "SampleInterval", Err: fmt.Errorf("is %v: use a positive duration, or 0 for %v", c.SampleInterval, SampleIntervalDefault)}
	case c.SampleTimeout < 0:
		return &outbox.ConfigError{Field: "SampleTimeout", Err: fmt.Errorf("is %v: use a positive duration, or 0 for %v", c.SampleTimeout, SampleTimeoutDefault)}
	}
	return nil
}

// Metrics is the outbox's Prometheus metrics. Add it to
// outbox.RelayConfig.Hooks to observe a relay; it is an outbox.HookBatch,
// an outbox.HookRescue, an outbox.HookSinkState and the scheduled jobs'
// hooks (outbox.HookPurge, outbox.HookLeaderLease, outbox.HookDeadLetterRetry).
// It is safe for concurrent use.
type Metrics struct {
	cfg Config

	published    prometheus.Counter
	errRetryable prometheus.Counter // children of one CounterVec
	errPermanent prometheus.Counter
	retried      prometheus.Counter
	dead         prometheus.Counter
	released     prometheus.Counter
	expired      prometheus.Counter
	commitToPub  prometheus.Histogram
	claimDur     prometheus.Histogram
	publishDur   prometheus.Histogram
	markDur      prometheus.Histogram
	batchSize    prometheus.Histogram
	relayUp      prometheus.Gauge
	lastBatch    prometheus.Gauge
	sinkUp       prometheus.Gauge
	circuit      *prometheus.GaugeVec
	slotLag      *prometheus.GaugeVec
	schedule     scheduleMetrics

	table *tableCollector // nil without a Manager
	// collectors are what New registered, for Unregister.
	collectors []prometheus.Collector
}

// Error kinds, the values of outbox_publish_errors_total's kind label.
const (
	KindRetryable = "retryable"
	KindPermanent = "permanent"
)

// New returns Metrics registered on cfg.Registerer. It fails if the
// configuration is invalid or if metrics with the same schema and sink
// labels are already registered there.
func New(cfg Config) (*Metrics, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Metrics{cfg: cfg}
	relayLabels := cfg.labels()
	relayLabels["sink"] = cfg.Sink
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: relayLabels})
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: relayLabels})
	}
	m.published = counter("outbox_published_total", "Events the sink delivered and the relay marked processed.")
	const errHelp = "Events the sink failed to publish, by kind: retryable errors are retried with backoff, permanent ones dead-letter the event."
	publishErrors := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outbox_publish_errors_total", Help: errHelp, ConstLabels: relayLabels}, []string{"kind"})
	m.errRetryable = publishErrors.WithLabelValues(KindRetryable)
	m.errPermanent = publishErrors.WithLabelValues(KindPermanent)
	m.retried = counter("outbox_retries_total", "Failed publishes scheduled for another attempt after a backoff.")
	m.dead = counter("outbox_dead_lettered_total", "Events moved to failed (dead-lettered): out of attempts or permanently rejected.")
	m.released = counter("outbox_released_total", "Claimed events handed back to pending without spending an attempt: the relay was stopping, or the sink was unreachable.")
	m.expired = counter("outbox_lease_expired_total",
		"Events whose lease expired because the relay holding them died or hung, counted by the relay that rescued them; each expiry spends an attempt.")
	m.commitToPub = histogram("outbox_commit_to_publish_seconds",
		"Seconds from an event's created_at (its writing transaction, database clock) to the sink's acknowledgement (relay clock), for delivered events.", LatencyBuckets)
	m.claimDur = histogram("outbox_claim_duration_seconds", "Seconds one claim statement took, for claims that returned events.", DurationBuckets)
	m.publishDur = histogram("outbox_publish_duration_seconds", "Seconds the sink took to publish one batch.", DurationBuckets)
	m.markDur = histogram("outbox_mark_duration_seconds", "Seconds marking one batch's outcomes (processed, retry, failed) took.", DurationBuckets)
	m.batchSize = histogram("outbox_batch_size", "Events per claimed batch.", BatchSizeBuckets)
	m.relayUp = prometheus.NewGauge(prometheus.GaugeOpts{Name: "outbox_relay_up",
		Help: "1 while this process's relay runs (see SetRelayUp); count(outbox_relay_up == 1) is the number of relays alive.", ConstLabels: relayLabels})
	m.lastBatch = prometheus.NewGauge(prometheus.GaugeOpts{Name: "outbox_last_batch_timestamp_seconds",
		Help: "Unix time at which the relay last settled a claimed batch.", ConstLabels: relayLabels})

	m.sinkUp = prometheus.NewGauge(prometheus.GaugeOpts{Name: "outbox_sink_up",
		Help: "1 while the relay's circuit on its sink is closed, 0 while the sink is unreachable (connection refused, DNS, TLS handshake) and the relay probes it instead of claiming.", ConstLabels: relayLabels})
	m.circuit = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "outbox_sink_circuit_state",
		Help: "1 for the current state of the relay's circuit on its sink (closed, open or half-open), 0 for the others.", ConstLabels: relayLabels}, []string{"state"})
	m.setSinkState(outbox.CircuitClosed)
	m.slotLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "outbox_replication_slot_lag_bytes",
		Help: "Bytes of WAL the capture relay's logical replication slot keeps on the server (current WAL position minus the slot's restart_lsn), read every 10s; only relays with --capture logical report it.", ConstLabels: relayLabels}, []string{"slot"})

	collectors := []prometheus.Collector{
		m.published, publishErrors, m.retried, m.dead, m.released, m.expired, m.commitToPub,
		m.claimDur, m.publishDur, m.markDur, m.batchSize, m.relayUp, m.lastBatch, m.sinkUp, m.circuit, m.slotLag,
	}
	collectors = append(collectors, m.newScheduleMetrics(relayLabels)...)
	if cfg.Manager != nil {
		m.table = newTableCollector(cfg)
		collectors = append(collectors, m.table)
	}
	for i, c := range collectors {
		if err := cfg.Registerer.Register(c); err != nil {
			for _, r := range collectors[:i] {
				cfg.Registerer.Unregister(r)
			}
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("outboxprom: register metrics: %w (metrics for schema %q and sink %q are already registered: reuse them, or give each relay a distinct Config.Sink)", err, cfg.Schema, cfg.Sink)
			}
			return nil, fmt.Errorf("outboxprom: register metrics: %w", err)
		}
	}
	m.collectors = collectors
	return m, nil
}

// Unregister removes the metrics from the Registerer, as for a tenant whose
// relay stopped for good; Metrics must not be used afterwards.
func (m *Metrics) Unregister() {
	for _, c := range m.collectors {
		m.cfg.Registerer.Unregister(c)
	}
}

// Registerer is where the metrics are registered: Config.Registerer, or the
// registry New made.
func (m *Metrics) Registerer() prometheus.Registerer { return m.cfg.Registerer }

// Handler serves the metrics in the Prometheus exposition format. It works
// when the Registerer is also a prometheus.Gatherer, as a
// *prometheus.Registry is (and the default one New makes); otherwise serve
// the registry you passed with promhttp.HandlerFor.
func (m *Metrics) Handler() http.Handler {
	g, ok := m.cfg.Registerer.(prometheus.Gatherer)
	if !ok {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "outboxprom: the Registerer is not a Gatherer: serve your registry with promhttp.HandlerFor", http.StatusInternalServerError)
		})
	}
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}

// SetReplicationSlotLag sets outbox_replication_slot_lag_bytes for slot:
// the WAL the slot retains, as outboxcdc.Config.OnSlotLag reports it.
func (m *Metrics) SetReplicationSlotLag(slot string, bytes int64) {
	m.slotLag.WithLabelValues(slot).Set(float64(bytes))
}

// ObserveCapture counts a publish of the capture stream (outboxcdc): the
// events delivered in outbox_published_total, the failed ones in
// outbox_publish_errors_total{kind="retryable"} (the table path retries
// them), as outboxcdc.Config.OnPublish reports them.
func (m *Metrics) ObserveCapture(delivered, failed int) {
	m.published.Add(float64(delivered))
	m.errRetryable.Add(float64(failed))
}

// SetRelayUp sets outbox_relay_up: call it with true once the relay has
// started and with false when it stops. A relay whose process dies stops
// being scraped, so alert on absent or stale series too (see
// docs/observability.md).
func (m *Metrics) SetRelayUp(up bool) { setBool(m.relayUp, up) }

// setBool sets g to 1 for true, 0 for false.
func setBool(g prometheus.Gauge, b bool) {
	v := 0.0
	if b {
		v = 1
	}
	g.Set(v)
}

// OnRescue records a lease rescue: the expiries, and the events it
// dead-lettered. It implements outbox.HookRescue.
func (m *Metrics) OnRescue(_ context.Context, r outbox.RescueInfo) {
	m.expired.Add(float64(len(r.Rescued) + len(r.Dead)))
	m.dead.Add(float64(len(r.Dead)))
}

// OnBatch records a settled batch. It implements outbox.HookBatch.
func (m *Metrics) OnBatch(_ context.Context, b outbox.BatchInfo) {
	m.batchSize.Observe(float64(len(b.Events)))
	m.claimDur.Observe(b.ClaimDuration.Seconds())
	m.lastBatch.SetToCurrentTime()
	m.published.Add(float64(b.Published))
	m.retried.Add(float64(b.Retried))
	m.dead.Add(float64(b.Dead))
	m.released.Add(float64(b.Released))
	if b.PublishedAt.IsZero() {
		return // released before publishing: the relay was stopping, the sink's circuit opened, or a suspect waits
	}
	m.publishDur.Observe(b.PublishDuration.Seconds())
	m.markDur.Observe(b.MarkDuration.Seconds())
	var retryable, permanent int
	for i, err := range b.Errors {
		switch {
		case err == nil:
			if i < len(b.Events) {
				m.commitToPub.Observe(max(b.PublishedAt.Sub(b.Events[i].CreatedAt).Seconds(), 0))
			}
		case outbox.IsPermanent(err):
			permanent++
		default:
			retryable++
		}
	}
	// On a hard stop the relay releases the publishes it cancelled; they
	// are the retryable errors, and no sink failure.
	retryable = max(retryable-b.Released, 0)
	m.errRetryable.Add(float64(retryable))
	m.errPermanent.Add(float64(permanent))
}

// OnSinkState records a change of the relay's circuit on its sink in
// outbox_sink_up and outbox_sink_circuit_state. It implements
// outbox.HookSinkState.
func (m *Metrics) OnSinkState(_ context.Context, s outbox.SinkState) { m.setSinkState(s.Circuit) }

func (m *Metrics) setSinkState(state outbox.CircuitState) {
	setBool(m.sinkUp, state == outbox.CircuitClosed)
	for _, s := range []outbox.CircuitState{outbox.CircuitClosed, outbox.CircuitOpen, outbox.CircuitHalfOpen} {
		setBool(m.circuit.WithLabelValues(string(s)), s == state)
	}
}

var (
	_ outbox.HookBatch     = (*Metrics)(nil)
	_ outbox.HookSinkState = (*Metrics)(nil)
)

// samples reports how many statistics queries the table gauges ran; tests
// use it.
func (m *Metrics) samples() int64 {
	if m.table == nil {
		return 0
	}
	return m.table.queries.Load()
}
