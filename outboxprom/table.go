package outboxprom

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox"
)

// tableCollector serves the gauges that need the table's statistics. It
// samples them on a scrape when the last sample is older than the interval
// and serves the cached sample otherwise, so scrapes from several
// Prometheus servers, or a scrape interval shorter than the sample interval,
// cost the database nothing extra.
type tableCollector struct {
	mgr      *outbox.Manager
	interval time.Duration
	timeout  time.Duration
	log      *slog.Logger
	now      func() time.Time // time.Now; tests move it

	events  *prometheus.Desc
	age     *prometheus.Desc
	errors  prometheus.Counter
	queries atomic.Int64 // statistics queries run, for tests

	// mu serializes sampling: concurrent scrapes wait for one query
	// instead of each running their own.
	mu        sync.Mutex
	sampledAt time.Time
	stats     outbox.Stats
	err       error
}

func newTableCollector(cfg Config) *tableCollector {
	labels := prometheus.Labels{"schema": cfg.Schema}
	return &tableCollector{
		mgr: cfg.Manager, interval: cfg.SampleInterval, timeout: cfg.SampleTimeout, now: time.Now,
		log: cfg.Logger.With(slog.String("component", "outboxprom"), slog.String("schema", cfg.Schema)),
		events: prometheus.NewDesc("outbox_events",
			"Events per status, sampled at most once per sample interval. pending, processing and failed are exact; processed is the planner's estimate.",
			[]string{"status"}, labels),
		age: prometheus.NewDesc("outbox_oldest_pending_age_seconds",
			"Seconds the oldest due pending event has waited: the publisher's lag. 0 when nothing is due.",
			nil, labels),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "outbox_stats_errors_total",
			Help:        "Samples of the table's statistics that failed; outbox_events and outbox_oldest_pending_age_seconds are absent until one succeeds.",
			ConstLabels: labels}),
	}
}

// Describe implements prometheus.Collector.
func (c *tableCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.age
	c.errors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *tableCollector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.sample()
	if err == nil {
		for _, v := range []struct {
			status outbox.Status
			n      int64
		}{
			{outbox.StatusPending, s.Pending}, {outbox.StatusProcessing, s.Processing},
			{outbox.StatusProcessed, s.Processed}, {outbox.StatusFailed, s.Failed},
		} {
			ch <- prometheus.MustNewConstMetric(c.events, prometheus.GaugeValue, float64(v.n), string(v.status))
		}
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, s.OldestPendingAge.Seconds())
	}
	c.errors.Collect(ch)
}

// sample returns the cached statistics, refreshing them first when they are
// older than the interval. A failed sample is cached too, so a database
// that is down is not asked again on every scrape.
func (c *tableCollector) sample() (outbox.Stats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if !c.sampledAt.IsZero() && now.Sub(c.sampledAt) < c.interval {
		return c.stats, c.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	c.queries.Add(1)
	c.stats, c.err = c.mgr.EstimateStats(ctx)
	c.sampledAt = now
	if c.err != nil {
		c.errors.Inc()
		c.log.Warn("sampling the outbox statistics failed; the table gauges are absent until a sample succeeds",
			slog.String("error", c.err.Error()), slog.Duration("retry_in", c.interval))
	}
	return c.stats, c.err
}
