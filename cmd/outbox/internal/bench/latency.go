package bench

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/outboxkit/outbox"
)

// deliverTimeout bounds the wait, after latency's writers stopped, for the
// relay to deliver what they committed.
const deliverTimeout = 30 * time.Second

// Latency runs Writers writers at Rate events per second in total for
// Duration while the relay runs, and measures each event's latency from the
// moment its writer's Commit returned to the moment the sink acknowledged
// it, both by this host's clock. It waits until every committed event is
// delivered; the report's EventsPerS is the writers' achieved rate. Before
// the measured run each writer connection commits one event, delivered
// first and not measured (LatencyStats.WarmupEvents).
func (r *Runner) Latency(ctx context.Context, retention outbox.Retention, wake Wake) (Report, error) {
	return r.latency(ctx, retention, wake, 0)
}

// OrderedLatency is Latency with the relay ordered (RelayConfig.Ordering
// aggregate) and the writers' events spread over keys aggregates. The
// capture relay (WakeLogical) has no ordered mode.
func (r *Runner) OrderedLatency(ctx context.Context, retention outbox.Retention, wake Wake, keys int) (Report, error) {
	if keys < 1 {
		return Report{}, &ConfigError{Field: "OrderedKeys", Err: fmt.Errorf("has %d: use at least 1", keys)}
	}
	if wake == WakeLogical {
		return Report{}, &ConfigError{Field: "Wakes", Err: errors.New("has logical with ordering: the capture relay has no ordered mode, use poll, listen or process")}
	}
	return r.latency(ctx, retention, wake, keys)
}

// latency is Latency; with keys > 0, OrderedLatency.
func (r *Runner) latency(ctx context.Context, retention outbox.Retention, wake Wake, keys int) (Report, error) {
	rep := Report{Scenario: ScenarioLatency, Retention: string(retention), Wake: wake}
	ordering := outbox.OrderingNone
	if keys > 0 {
		rep.Ordering, rep.Keys, ordering = string(outbox.OrderingAggregate), keys, outbox.OrderingAggregate
	}
	err := r.withScratch(ctx, &rep, func(s scratch) error {
		if err := s.createOrders(ctx); err != nil {
			return err
		}
		if err := s.settle(ctx); err != nil {
			return err
		}
		var err error
		if rep.Table.Before, err = s.tableSize(ctx); err != nil {
			return err
		}
		p := s.pools()
		defer p.close(ctx)
		wpool, err := p.writers(ctx, "outbox-bench-writer:"+s.name(), r.cfg.Writers)
		if err != nil {
			return err
		}
		rec := newRecorder(r.cfg.Sink, int(float64(r.cfg.Rate)*r.cfg.Duration.Seconds()))
		relay, err := r.startRelay(ctx, p, s, retention, wake, ordering, rec)
		if err != nil {
			return err
		}
		tokens := make(chan struct{})
		run := writerRun{pool: wpool, payload: r.payload, n: r.cfg.Writers,
			writer: r.newWriter(s, wake), tokens: tokens, keys: keys}
		if wake == WakeProcess {
			run.afterCommit = relay.Wake
		}

		// Warm-up: one transaction per writer connection, delivered before
		// the measured run starts, so that neither the writers' nor the
		// relay's first statements count. It matters most to an ordered
		// relay: a writer preparing its statements holds the xmin horizon,
		// and every event committed meanwhile waits for it.
		// The relay is woken after it in every mode: the warm-up commits
		// on every connection at once, and a writer's debounced NOTIFY
		// wakes the relay for the first of them only, so one that commits
		// late would wait for the poll (an hour in some tests).
		warm, err := run.warm(ctx)
		if err == nil {
			relay.Wake()
			err = r.waitDelivered(ctx, warm, rec)
		}
		if err != nil {
			return errors.Join(fmt.Errorf("latency: %w", err), stopRelay(ctx, relay))
		}

		r.progress("latency (%s, wake %s, ordering %s): %d writers at %d events/s for %v", retention, wake, ordering, r.cfg.Writers, r.cfg.Rate, r.cfg.Duration)
		rss := startRSS()
		paceCtx, stopPacing := context.WithCancel(ctx)
		defer stopPacing()
		window := make(chan time.Duration, 1)
		go func() { window <- pace(paceCtx, r.cfg.Rate, r.cfg.Duration, tokens) }()
		commits, _, runErr := run.run(ctx)
		// Normally the pacer has closed tokens already; after a writer
		// error it may still wait for a free writer.
		stopPacing()
		paced := <-window
		var waitErr error
		if runErr == nil {
			waitErr = r.waitDelivered(ctx, commits, rec)
		}
		stopErr := stopRelay(ctx, relay)
		rss.stopInto(&rep)
		if err := errors.Join(runErr, waitErr, stopErr); err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		p.close(ctx)
		if rep.Table.After, err = s.tableSize(ctx); err != nil {
			return err
		}

		_, rep.Duplicates, _ = rec.counts()
		rep.Events, rep.Seconds = int64(len(commits)), paced.Seconds()
		rep.EventsPerS = float64(len(commits)) / paced.Seconds()
		lat := latencies(commits, rec)
		if err := r.writeTimeline(rep, commits, rec); err != nil {
			return fmt.Errorf("latency: --timeline: %w", err)
		}
		rep.LatencyStats = &LatencyStats{
			WarmupEvents:     int64(len(warm)),
			TargetEventsPerS: float64(r.cfg.Rate),
			RateReached:      rep.EventsPerS >= 0.99*float64(r.cfg.Rate),
			Count:            int64(len(lat)),
			P50MS:            ms(percentile(lat, 0.50)),
			P95MS:            ms(percentile(lat, 0.95)),
			P99MS:            ms(percentile(lat, 0.99)),
			MaxMS:            ms(percentile(lat, 1)),
		}
		return nil
	})
	return rep, err
}

// waitDelivered waits until the sink acknowledged every commit, a publish
// failed, or deliverTimeout passed.
func (r *Runner) waitDelivered(ctx context.Context, commits []commit, rec *recorder) error {
	ids := make([]int64, len(commits))
	for i, c := range commits {
		ids[i] = c.id
	}
	ctx, cancel := context.WithTimeout(ctx, deliverTimeout)
	defer cancel()
	err := poll(ctx, 5*time.Millisecond, func() (bool, error) {
		if err := rec.err(); err != nil {
			return false, err
		}
		return rec.allAcked(ids), nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		delivered, _, _ := rec.counts()
		return fmt.Errorf("the relay delivered %d of %d committed events within %v of the writers' end", delivered, len(ids), deliverTimeout)
	}
	return err
}

// latencies returns each commit's commit→ack latency, sorted. An event the
// sink acknowledged before its writer's Commit returned (the relay can be
// that quick) counts as 0.
func latencies(commits []commit, rec *recorder) []time.Duration {
	out := make([]time.Duration, 0, len(commits))
	for _, c := range commits {
		if lat, ok := latencyOf(c, rec); ok {
			out = append(out, lat)
		}
	}
	slices.Sort(out)
	return out
}

// latencyOf is c's commit→ack latency, 0 if the sink acknowledged the event
// before Commit returned; false if it was not acknowledged.
func latencyOf(c commit, rec *recorder) (time.Duration, bool) {
	at, ok := rec.ackedAt(c.id)
	return max(at.Sub(c.at), 0), ok
}

// percentile returns the nearest-rank p-th percentile of sorted (p in
// (0, 1]); 0 for none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// timelineHeader names the columns of Config.Timeline.
var timelineHeader = []string{"wake", "ordering", "keys", "event_id", "committed_at", "latency_ms"}

// writeTimeline adds a latency run's measured events to Config.Timeline,
// after the header if it is the first run to write.
func (r *Runner) writeTimeline(rep Report, commits []commit, rec *recorder) error {
	if r.cfg.Timeline == nil {
		return nil
	}
	if r.timeline == nil {
		r.timeline = csv.NewWriter(r.cfg.Timeline)
		if err := r.timeline.Write(timelineHeader); err != nil {
			return err
		}
	}
	ordering := cmp.Or(rep.Ordering, string(outbox.OrderingNone))
	keys := strconv.Itoa(rep.Keys)
	for _, c := range commits {
		lat, ok := latencyOf(c, rec)
		if !ok {
			continue
		}
		if err := r.timeline.Write([]string{string(rep.Wake), ordering, keys, strconv.FormatInt(c.id, 10),
			c.at.UTC().Format(time.RFC3339Nano), strconv.FormatFloat(ms(lat), 'f', 3, 64)}); err != nil {
			return err
		}
	}
	r.timeline.Flush()
	return r.timeline.Error()
}
