package outboxprom

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox"
)

// scheduleMetrics are the series of the relay's scheduled jobs (scheduled
// purge, dead-letter slow retry) and of the job lease that elects the
// relay running them.
type scheduleMetrics struct {
	purged      *prometheus.CounterVec
	purgeErrors prometheus.Counter
	purgeOK     prometheus.Gauge
	leader      prometheus.Gauge
	dlqRequeued prometheus.Counter
	dlqErrors   prometheus.Counter
}

// newScheduleMetrics builds the scheduled jobs' series and returns them to
// register.
func (m *Metrics) newScheduleMetrics(labels prometheus.Labels) []prometheus.Collector {
	s := &m.schedule
	s.purged = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outbox_purge_deleted_total",
		Help:        "Rows the scheduled purge deleted, by status: processed and failed from outbox_events, archived from outbox_events_archive.",
		ConstLabels: labels}, []string{"status"})
	s.purgeErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "outbox_purge_errors_total",
		Help: "Scheduled purge runs that failed; the next interval tries again.", ConstLabels: labels})
	s.purgeOK = prometheus.NewGauge(prometheus.GaugeOpts{Name: "outbox_purge_last_success_timestamp_seconds",
		Help: "Unix time at which this relay last finished a scheduled purge; 0 until it has.", ConstLabels: labels})
	s.leader = prometheus.NewGauge(prometheus.GaugeOpts{Name: "outbox_scheduled_job_leader",
		Help: "1 while this relay holds the job lease and runs the scheduled jobs; sum over the fleet is 1 when they run.", ConstLabels: labels})
	s.dlqRequeued = prometheus.NewCounter(prometheus.CounterOpts{Name: "outbox_dead_letter_retried_total",
		Help: "Dead-lettered events the slow retry sent back to pending.", ConstLabels: labels})
	s.dlqErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "outbox_dead_letter_retry_errors_total",
		Help: "Passes of the dead-letter slow retry that failed; the next pass tries again.", ConstLabels: labels})
	for _, st := range []string{"processed", "archived", "failed"} {
		s.purged.WithLabelValues(st) // every series from the start, at 0
	}
	return []prometheus.Collector{s.purged, s.purgeErrors, s.purgeOK, s.leader, s.dlqRequeued, s.dlqErrors}
}

// OnPurge records a scheduled purge run. It implements outbox.HookPurge.
func (m *Metrics) OnPurge(_ context.Context, p outbox.PurgeInfo) {
	s := &m.schedule
	s.purged.WithLabelValues("processed").Add(float64(p.Processed))
	s.purged.WithLabelValues("archived").Add(float64(p.Archived))
	s.purged.WithLabelValues("failed").Add(float64(p.Failed))
	if p.Err != nil {
		s.purgeErrors.Inc()
		return
	}
	s.purgeOK.SetToCurrentTime()
}

// OnLeaderLease records a change of the job lease. It implements
// outbox.HookLeaderLease.
func (m *Metrics) OnLeaderLease(_ context.Context, l outbox.LeaderLeaseInfo) {
	setBool(m.schedule.leader, l.Leader)
}

// OnDeadLetterRetry records a pass of the dead-letter slow retry. It
// implements outbox.HookDeadLetterRetry.
func (m *Metrics) OnDeadLetterRetry(_ context.Context, d outbox.DeadLetterRetryInfo) {
	m.schedule.dlqRequeued.Add(float64(d.Requeued))
	if d.Err != nil {
		m.schedule.dlqErrors.Inc()
	}
}

var (
	_ outbox.HookPurge           = (*Metrics)(nil)
	_ outbox.HookLeaderLease     = (*Metrics)(nil)
	_ outbox.HookDeadLetterRetry = (*Metrics)(nil)
)

// dlqDescs are the table gauges of the dead-letter slow retry.
type dlqDescs struct {
	waiting, nextDue *prometheus.Desc
}

func newDLQDescs(labels prometheus.Labels) dlqDescs {
	return dlqDescs{
		waiting: prometheus.NewDesc("outbox_dead_letter_retry_waiting",
			"Failed events with a slow retry scheduled (the relay's dead-letter retry).", nil, labels),
		nextDue: prometheus.NewDesc("outbox_dead_letter_retry_next_due_timestamp_seconds",
			"Unix time at which the next scheduled slow retry is due; absent when none is.", nil, labels),
	}
}

func (d dlqDescs) describe(ch chan<- *prometheus.Desc) {
	ch <- d.waiting
	ch <- d.nextDue
}

func (d dlqDescs) collect(ch chan<- prometheus.Metric, s outbox.DeadLetterRetryStats) {
	ch <- prometheus.MustNewConstMetric(d.waiting, prometheus.GaugeValue, float64(s.Waiting))
	if !s.NextDue.IsZero() {
		ch <- prometheus.MustNewConstMetric(d.nextDue, prometheus.GaugeValue, float64(s.NextDue.UnixMilli())/1000)
	}
}
