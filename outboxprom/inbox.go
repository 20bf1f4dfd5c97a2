package outboxprom

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
)

// InboxConfig configures InboxMetrics.
type InboxConfig struct {
	// Registerer is where the metrics are registered. Defaults to a new
	// registry of their own.
	Registerer prometheus.Registerer
	// Database, when set, feeds outbox_consumer_lag_seconds and
	// outbox_inbox_unprocessed from inbox.Lag at each scrape. Without it
	// only the counters and the delay histogram exist.
	Database outbox.Database
	// Schema holds inbox_messages, and is every series' schema label.
	// Defaults to outbox.SchemaDefault.
	Schema string
	// Consumers are reported with a lag of 0 while they have no backlog;
	// consumers seen by OnReceive are added. Without them a consumer that
	// is caught up has no lag series.
	Consumers []string
	// SampleTimeout bounds the lag query of one scrape. Defaults to
	// SampleTimeoutDefault.
	SampleTimeout time.Duration
	// Logger receives a warning when a lag query fails. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// InboxMetrics is the consumer side's Prometheus metrics. Add it to
// inbox.Config.Hooks; it is an inbox.HookReceive. It is safe for
// concurrent use.
//
//	outbox_inbox_received_total{schema,consumer}       messages stored for the first time
//	outbox_inbox_duplicates_total{schema,consumer}     deliveries of a message already stored
//	outbox_inbox_receive_delay_seconds{schema,consumer} event commit at the source to receive
//	outbox_consumer_lag_seconds{schema,consumer}       age of the oldest unprocessed message
//	outbox_inbox_unprocessed{schema,consumer}          unprocessed messages
type InboxMetrics struct {
	cfg        InboxConfig
	received   *prometheus.CounterVec
	duplicates *prometheus.CounterVec
	delay      *prometheus.HistogramVec
	lag        *lagCollector // nil without a Database
}

// NewInbox returns InboxMetrics registered on cfg.Registerer.
func NewInbox(cfg InboxConfig) (*InboxMetrics, error) {
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	cfg.Schema = cmp.Or(cfg.Schema, outbox.SchemaDefault)
	cfg.SampleTimeout = cmp.Or(cfg.SampleTimeout, SampleTimeoutDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.SampleTimeout < 0 {
		return nil, &outbox.ConfigError{Field: "SampleTimeout", Err: fmt.Errorf("is %v: use a positive duration", cfg.SampleTimeout)}
	}
	labels := prometheus.Labels{"schema": cfg.Schema}
	m := &InboxMetrics{cfg: cfg}
	m.received = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outbox_inbox_received_total",
		Help: "Messages the inbox stored for the first time, by consumer.", ConstLabels: labels}, []string{"consumer"})
	m.duplicates = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outbox_inbox_duplicates_total",
		Help: "Deliveries of a message the inbox had stored before for the consumer: dropped, effect not applied again.", ConstLabels: labels}, []string{"consumer"})
	m.delay = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "outbox_inbox_receive_delay_seconds",
		Help:    "Seconds from an event's commit at its source (the CloudEvents time) to its receive into the inbox, by the two machines' clocks, for messages that carry a time.",
		Buckets: LatencyBuckets, ConstLabels: labels}, []string{"consumer"})
	collectors := []prometheus.Collector{m.received, m.duplicates, m.delay}
	if cfg.Database != nil {
		m.lag = &lagCollector{cfg: cfg, known: map[string]bool{},
			lagDesc: prometheus.NewDesc("outbox_consumer_lag_seconds",
				"Age in seconds of the consumer's oldest received and unprocessed inbox message (database clock); 0 when it is caught up.", []string{"consumer"}, labels),
			countDesc: prometheus.NewDesc("outbox_inbox_unprocessed",
				"Inbox messages received and not yet processed, by consumer.", []string{"consumer"}, labels),
			upDesc: prometheus.NewDesc("outbox_inbox_lag_query_ok",
				"1 when this scrape's lag query succeeded, 0 when it failed (the lag series are then missing).", nil, labels)}
		for _, c := range cfg.Consumers {
			m.lag.known[c] = true
		}
		collectors = append(collectors, m.lag)
	}
	for i, c := range collectors {
		if err := cfg.Registerer.Register(c); err != nil {
			for _, r := range collectors[:i] {
				cfg.Registerer.Unregister(r)
			}
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("outboxprom: register inbox metrics: %w (inbox metrics for schema %q are already registered: reuse them)", err, cfg.Schema)
			}
			return nil, fmt.Errorf("outboxprom: register inbox metrics: %w", err)
		}
	}
	// Known consumers start at zero so rate() works from the first
	// message.
	for _, c := range cfg.Consumers {
		m.received.WithLabelValues(c)
		m.duplicates.WithLabelValues(c)
	}
	return m, nil
}

var _ inbox.HookReceive = (*InboxMetrics)(nil)

// OnReceive counts one receive.
func (m *InboxMetrics) OnReceive(_ context.Context, r inbox.ReceiveInfo) {
	if r.Duplicate {
		m.duplicates.WithLabelValues(r.Consumer).Inc()
		m.received.WithLabelValues(r.Consumer) // the pair exists together
	} else {
		m.received.WithLabelValues(r.Consumer).Inc()
		m.duplicates.WithLabelValues(r.Consumer)
		if r.Delay > 0 {
			m.delay.WithLabelValues(r.Consumer).Observe(r.Delay.Seconds())
		}
	}
	if m.lag != nil {
		m.lag.see(r.Consumer)
	}
}

// lagCollector reads inbox.Lag at each scrape.
type lagCollector struct {
	cfg                        InboxConfig
	lagDesc, countDesc, upDesc *prometheus.Desc
	mu                         sync.Mutex
	known                      map[string]bool
}

func (c *lagCollector) see(consumer string) {
	c.mu.Lock()
	c.known[consumer] = true
	c.mu.Unlock()
}

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lagDesc
	ch <- c.countDesc
	ch <- c.upDesc
}

func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.SampleTimeout)
	defer cancel()
	lags, err := inbox.Lag(ctx, c.cfg.Database, c.cfg.Schema)
	if err != nil {
		c.cfg.Logger.Warn("outboxprom: inbox lag query failed", slog.String("component", "outboxprom"), slog.String("error", err.Error()))
		ch <- prometheus.MustNewConstMetric(c.upDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.upDesc, prometheus.GaugeValue, 1)
	c.mu.Lock()
	zero := make([]string, 0, len(c.known))
	for k := range c.known {
		zero = append(zero, k)
	}
	c.mu.Unlock()
	for _, l := range lags {
		ch <- prometheus.MustNewConstMetric(c.lagDesc, prometheus.GaugeValue, l.OldestUnprocessedAge.Seconds(), l.Consumer)
		ch <- prometheus.MustNewConstMetric(c.countDesc, prometheus.GaugeValue, float64(l.Unprocessed), l.Consumer)
		zero = slices.DeleteFunc(zero, func(s string) bool { return s == l.Consumer })
	}
	for _, k := range zero {
		ch <- prometheus.MustNewConstMetric(c.lagDesc, prometheus.GaugeValue, 0, k)
		ch <- prometheus.MustNewConstMetric(c.countDesc, prometheus.GaugeValue, 0, k)
	}
}
