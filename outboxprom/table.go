package outboxprom

import (
	"context"
	"errors"
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
	blocked *prometheus.Desc
	dlq     dlqDescs
	health  healthDescs
	errors  prometheus.Counter
	queries atomic.Int64 // samples taken, for tests

	// mu serializes sampling: concurrent scrapes wait for one sample
	// instead of each taking their own.
	mu        sync.Mutex
	sampledAt time.Time
	last      sample
}

// sample is one reading of the table's statistics and health; either may
// fail alone.
type sample struct {
	stats     outbox.Stats
	err       error
	health    outbox.TableHealth
	healthErr error
	// blocked counts the aggregates ordered delivery holds back; absent
	// (blockedErr set) where the database has no ordering.
	blocked    int64
	blockedErr error
}

func newTableCollector(cfg Config) *tableCollector {
	labels := cfg.labels()
	return &tableCollector{
		mgr: cfg.Manager, interval: cfg.SampleInterval, timeout: cfg.SampleTimeout, now: time.Now,
		log: cfg.Logger.With(slog.String("component", "outboxprom"), slog.String("schema", cfg.Schema)),
		events: prometheus.NewDesc("outbox_events",
			"Events per status, sampled at most once per sample interval. pending, processing and failed are exact; processed is the planner's estimate.",
			[]string{"status"}, labels),
		age: prometheus.NewDesc("outbox_oldest_pending_age_seconds",
			"Seconds the oldest due pending event has waited: the publisher's lag. 0 when nothing is due.",
			nil, labels),
		blocked: prometheus.NewDesc("outbox_blocked_aggregates",
			"Aggregates whose ordered delivery (relay --ordering aggregate) waits behind a failed first event, dead-lettered or waiting for a retry, as the block policy counts them (sampled like outbox_events).",
			nil, labels),
		health: newHealthDescs(labels),
		dlq:    newDLQDescs(labels),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "outbox_stats_errors_total",
			Help:        "Samples of the table's statistics or health that failed; the gauges of the part that failed are absent until a sample succeeds.",
			ConstLabels: labels}),
	}
}

// Describe implements prometheus.Collector.
func (c *tableCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.age
	ch <- c.blocked
	c.dlq.describe(ch)
	c.health.describe(ch)
	c.errors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *tableCollector) Collect(ch chan<- prometheus.Metric) {
	smp := c.sample()
	if s := smp.stats; smp.err == nil {
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
		c.dlq.collect(ch, s.DeadLetterRetry)
	}
	if smp.blockedErr == nil {
		ch <- prometheus.MustNewConstMetric(c.blocked, prometheus.GaugeValue, float64(smp.blocked))
	}
	if smp.healthErr == nil {
		c.health.collect(ch, smp.health)
	}
	c.errors.Collect(ch)
}

// sample returns the cached statistics and health, refreshing them first
// when they are older than the interval. A failed sample is cached too, so
// a database that is down is not asked again on every scrape.
func (c *tableCollector) sample() sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if !c.sampledAt.IsZero() && now.Sub(c.sampledAt) < c.interval {
		return c.last
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	c.queries.Add(1)
	var smp sample
	smp.stats, smp.err = c.mgr.EstimateStats(ctx)
	smp.health, smp.healthErr = c.mgr.TableHealth(ctx)
	blocked, err := c.mgr.BlockedAggregates(ctx, outbox.OrderedFailureBlock, 0)
	smp.blocked, smp.blockedErr = blocked.Total, err
	if err != nil && !errors.Is(err, outbox.ErrOrderingUnsupported) && smp.err == nil {
		c.errors.Inc()
		c.log.Warn("counting blocked aggregates failed; the gauge is absent until a sample succeeds",
			slog.String("error", err.Error()), slog.Duration("retry_in", c.interval))
	}
	c.sampledAt, c.last = now, smp
	if smp.err != nil || smp.healthErr != nil {
		c.errors.Inc()
	}
	if smp.err != nil {
		c.log.Warn("sampling the outbox statistics failed; the table gauges are absent until a sample succeeds",
			slog.String("error", smp.err.Error()), slog.Duration("retry_in", c.interval))
	}
	if smp.healthErr != nil && smp.err == nil { // the same cause, mostly: said once
		c.log.Warn("reading the outbox table's health failed; its gauges are absent until a sample succeeds",
			slog.String("error", smp.healthErr.Error()), slog.Duration("retry_in", c.interval))
	}
	return smp
}
