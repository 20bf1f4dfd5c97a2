package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/leader"
)

// Scheduled-job defaults; RelayConfig.WithDefaults applies them when a job
// is enabled.
const (
	// PurgeIntervalDefault is how often the leading relay purges when
	// RelayConfig.PurgeAfter is set.
	PurgeIntervalDefault = time.Hour
	// DeadLetterRetriesDefault is how many slow retries an event gets when
	// RelayConfig.DeadLetterRetry is set.
	DeadLetterRetriesDefault = 3
	// ScheduleLeaseDefault is the length of the job lease.
	ScheduleLeaseDefault = 30 * time.Second
)

// scheduleLeaseName names the row in outbox_leases that elects the relay
// running the scheduled jobs of one schema.
const scheduleLeaseName = "scheduled_jobs"

// HookPurge is called after each scheduled purge run of the leading relay,
// whether it deleted anything or failed.
type HookPurge interface {
	OnPurge(ctx context.Context, p PurgeInfo)
}

// PurgeInfo describes one scheduled purge run.
type PurgeInfo struct {
	RelayID string
	// Processed, Archived and Failed count the rows deleted from
	// outbox_events (processed), outbox_events_archive and outbox_events
	// (failed); Batches counts the DELETE statements.
	Processed, Archived, Failed int64
	// Keys counts the rows deleted from MySQL/MariaDB's outbox_keys: the
	// key sequences of aggregates left with no unfinished event.
	Keys     int64
	Batches  int
	Duration time.Duration
	// Err is why the run stopped early (nil when it finished); the rows it
	// counted are deleted all the same.
	Err error
}

// HookLeaderLease is called when this relay gains or loses the job lease
// that elects the one relay of a fleet running the scheduled jobs.
type HookLeaderLease interface {
	OnLeaderLease(ctx context.Context, l LeaderLeaseInfo)
}

// LeaderLeaseInfo describes a change of the job lease.
type LeaderLeaseInfo struct {
	RelayID string
	// Leader is true when this relay gained the lease, false when it lost
	// or released it.
	Leader bool
}

// HookDeadLetterRetry is called after each pass of the dead-letter slow
// retry that scheduled or requeued events, or failed.
type HookDeadLetterRetry interface {
	OnDeadLetterRetry(ctx context.Context, d DeadLetterRetryInfo)
}

// DeadLetterRetryInfo describes one pass of the dead-letter slow retry.
type DeadLetterRetryInfo struct {
	RelayID string
	// Scheduled counts dead-lettered events given a retry time in this
	// pass; Requeued those sent back to pending.
	Scheduled, Requeued int64
	Duration            time.Duration
	Err                 error
}

// schedulesJobs reports whether any scheduled job is enabled.
func (c RelayConfig) schedulesJobs() bool {
	return c.PurgeAfter > 0 || c.PurgeFailedAfter > 0 || c.DeadLetterRetry > 0
}

// prunesKeys reports whether this relay schedules the pruning of
// outbox_keys even without a purge: an ordered relay on a database that
// keeps key rows (MySQL/MariaDB) runs the scheduled purge every
// PurgeInterval, which prunes them, so the table stays bounded whatever
// the retention.
func (r *Relay) prunesKeys() bool {
	kp, ok := r.drv.(driver.KeyPruner)
	return ok && kp.HasKeyRows() && r.cfg.Ordering == OrderingAggregate
}

// schedulesJobs reports whether this relay runs scheduled jobs.
func (r *Relay) schedulesJobs() bool { return r.cfg.schedulesJobs() || r.prunesKeys() }

// scheduleDefaults fills the scheduled jobs' zero fields, for WithDefaults;
// an ordered relay may prune keys on schedule (prunesKeys).
func (c *RelayConfig) scheduleDefaults() {
	if !c.schedulesJobs() && c.Ordering != OrderingAggregate {
		return
	}
	c.PurgeInterval = cmp.Or(c.PurgeInterval, PurgeIntervalDefault)
	c.PurgeBatchSize = cmp.Or(c.PurgeBatchSize, PurgeBatchSizeDefault)
	c.ScheduleLease = cmp.Or(c.ScheduleLease, ScheduleLeaseDefault)
	if c.DeadLetterRetry > 0 {
		c.DeadLetterRetries = cmp.Or(c.DeadLetterRetries, DeadLetterRetriesDefault)
	}
}

// validateSchedule checks the scheduled jobs' fields, for Validate.
func (c RelayConfig) validateSchedule() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case c.PurgeAfter < 0:
		return bad("PurgeAfter", "is %v: use a positive duration, or 0 for no scheduled purge", c.PurgeAfter)
	case c.PurgeFailedAfter < 0:
		return bad("PurgeFailedAfter", "is %v: use a positive duration, or 0 to keep dead-lettered events", c.PurgeFailedAfter)
	case c.DeadLetterRetry < 0:
		return bad("DeadLetterRetry", "is %v: use a positive duration, or 0 for no slow retry", c.DeadLetterRetry)
	case c.DeadLetterRetries < 0:
		return bad("DeadLetterRetries", "is %d: use at least 1", c.DeadLetterRetries)
	case !c.schedulesJobs() && c.Ordering != OrderingAggregate:
		return nil
	case c.PurgeInterval <= 0:
		return bad("PurgeInterval", "is %v: use a positive duration", c.PurgeInterval)
	case c.PurgeBatchSize < 1:
		return bad("PurgeBatchSize", "is %d: use at least 1", c.PurgeBatchSize)
	case c.ScheduleLease < time.Second:
		return bad("ScheduleLease", "is %v: use at least 1s", c.ScheduleLease)
	case c.DeadLetterRetry > 0 && c.DeadLetterRetries < 1:
		return bad("DeadLetterRetries", "is %d: use at least 1", c.DeadLetterRetries)
	}
	return nil
}

// checkScheduleSchema refuses to start scheduled jobs on a schema that
// lacks outbox_leases and the dead-letter retry columns. A schema whose
// version is unknown (0: migrations vendored into another tool) passes;
// its first job then fails with the database's error, logged.
func (r *Relay) checkScheduleSchema(version func() (int, error)) error {
	if !r.schedulesJobs() {
		return nil
	}
	v, err := version()
	if err != nil {
		return fmt.Errorf("outbox: relay: read the schema version: %w", err)
	}
	if v > 0 && v < driver.SchedulerVersion {
		return fmt.Errorf("outbox: relay: scheduled purge and dead-letter retry need schema version %d, schema %q is at %d: run outbox migrate",
			driver.SchedulerVersion, r.cfg.Schema, v)
	}
	return nil
}

// deadLetterRetryTick is how often the leader looks for dead-lettered
// events to schedule or requeue: a quarter of the retry interval, between
// 100ms and a minute, so a retry is at most that late.
func (c RelayConfig) deadLetterRetryTick() time.Duration {
	return min(max(c.DeadLetterRetry/4, 100*time.Millisecond), time.Minute)
}

// newElector builds the job lease's elector, when a scheduled job is
// enabled, for NewRelay.
func (r *Relay) newElector() error {
	if !r.schedulesJobs() {
		return nil
	}
	el, err := leader.New(leader.Config{
		Name: scheduleLeaseName, Holder: r.cfg.RelayID, TTL: r.cfg.ScheduleLease,
		Timeout: r.cfg.DBTimeout, Logger: r.log,
		OnChange: func(leader bool) {
			for _, h := range r.leaseHooks {
				r.safeHook(func() { h.OnLeaderLease(context.Background(), LeaderLeaseInfo{RelayID: r.cfg.RelayID, Leader: leader}) })
			}
		},
	})
	if err != nil {
		return &ConfigError{Field: "ScheduleLease", Err: err}
	}
	r.elector = el
	return nil
}

// startSchedule starts the job lease's elector and the scheduler, when a
// job is enabled, with goFn (the relay's wait group); both end when the
// relay stops claiming, and the elector then gives the lease up.
func (r *Relay) startSchedule(workCtx context.Context, goFn func(func())) {
	el := r.elector
	if el == nil {
		return
	}
	r.log.Info("scheduled jobs on: the relay holding the job lease runs them",
		slog.Duration("purge_after", r.cfg.PurgeAfter), slog.Duration("purge_failed_after", r.cfg.PurgeFailedAfter),
		slog.Duration("purge_interval", r.cfg.PurgeInterval), slog.Duration("dead_letter_retry", r.cfg.DeadLetterRetry),
		slog.Int("dead_letter_retries", r.cfg.DeadLetterRetries), slog.Duration("schedule_lease", r.cfg.ScheduleLease))
	jobCtx, stopJobs := context.WithCancel(workCtx)
	goFn(func() { el.Run(jobCtx, r.drv, r.settleBase) })
	goFn(func() { r.scheduleLoop(jobCtx, el) })
	goFn(func() {
		select {
		case <-r.stopping:
		case <-jobCtx.Done():
		}
		stopJobs()
	})
}

// scheduleLoop runs the scheduled jobs while this relay holds the job
// lease: a purge at once on gaining it and every PurgeInterval after, and
// a dead-letter retry pass every deadLetterRetryTick.
func (r *Relay) scheduleLoop(ctx context.Context, el *leader.Elector) {
	var lastPurge, lastRetry time.Time
	tick := r.cfg.PurgeInterval
	if r.cfg.DeadLetterRetry > 0 {
		tick = min(tick, r.cfg.deadLetterRetryTick())
	}
	for {
		changed := el.Changed()
		if el.IsLeader() {
			purge := r.cfg.PurgeAfter > 0 || r.cfg.PurgeFailedAfter > 0 || r.prunesKeys()
			if purge && (lastPurge.IsZero() || time.Since(lastPurge) >= r.cfg.PurgeInterval) {
				lastPurge = time.Now()
				r.runPurge(ctx, el)
			}
			if r.cfg.DeadLetterRetry > 0 && (lastRetry.IsZero() || time.Since(lastRetry) >= r.cfg.deadLetterRetryTick()) {
				lastRetry = time.Now()
				r.runDeadLetterRetry(ctx, el)
			}
		} else {
			// A relay that gains the lease runs its jobs at once.
			lastPurge, lastRetry = time.Time{}, time.Time{}
		}
		t := time.NewTimer(tick)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// errLeaseLost ends a scheduled job whose relay lost the job lease between
// two batches; the new leader carries on.
var errLeaseLost = errors.New("lost the job lease; the relay that holds it now carries on")

// scheduleBatches runs batch, each call under DBTimeout, until it changes
// fewer than size rows, the relay stops (ctx.Err()) or loses the lease
// (errLeaseLost); it returns the rows changed and the statements run.
func (r *Relay) scheduleBatches(ctx context.Context, el *leader.Elector, size int, batch func(context.Context) (int64, error)) (total int64, batches int, err error) {
	total, err = inBatches(0, size, nil, func() (int64, error) {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if !el.IsLeader() {
			return 0, errLeaseLost
		}
		bctx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
		defer cancel()
		n, err := batch(bctx)
		if err == nil {
			batches++
		}
		return n, err
	})
	return total, batches, err
}

// runPurge deletes processed events (and archived ones) older than
// PurgeAfter and dead-lettered ones older than PurgeFailedAfter, in
// batches of PurgeBatchSize, as `outbox purge` does.
func (r *Relay) runPurge(ctx context.Context, el *leader.Elector) {
	start := time.Now()
	info := PurgeInfo{RelayID: r.cfg.RelayID}
	size := r.cfg.PurgeBatchSize
	run := func(n *int64, batch func(context.Context) (int64, error)) {
		if info.Err != nil {
			return
		}
		var b int
		*n, b, info.Err = r.scheduleBatches(ctx, el, size, batch)
		info.Batches += b
	}
	if age := r.cfg.PurgeAfter; age > 0 {
		run(&info.Processed, func(ctx context.Context) (int64, error) {
			return r.drv.PurgeBatch(ctx, driver.PurgeParams{Status: driver.StatusProcessed, OlderThan: age, BatchSize: size})
		})
		if pp, ok := r.drv.(driver.ArchivePartitioner); ok && info.Err == nil && el.IsLeader() {
			// Whole partitions before the cutoff go in one statement each;
			// the rows left are deleted in batches below.
			pctx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
			info.Archived, _, info.Err = pp.PurgeArchivePartitions(pctx, age, nil)
			cancel()
		}
		var rows int64
		run(&rows, func(ctx context.Context) (int64, error) {
			return r.drv.PurgeArchiveBatch(ctx, age, size)
		})
		info.Archived += rows
	}
	if age := r.cfg.PurgeFailedAfter; age > 0 {
		run(&info.Failed, func(ctx context.Context) (int64, error) {
			return r.drv.PurgeBatch(ctx, driver.PurgeParams{Status: driver.StatusFailed, OlderThan: age, BatchSize: size})
		})
	}
	if kp, ok := r.drv.(driver.KeyPruner); ok && kp.HasKeyRows() {
		// One walk of outbox_keys a run; each batch counts as size rows
		// while the walk goes on, so scheduleBatches runs the next.
		var (
			cur   driver.KeyCursor
			walks int64
		)
		run(&walks, func(ctx context.Context) (int64, error) {
			n, next, more, err := kp.PruneKeysBatch(ctx, cur, size)
			info.Keys += n
			cur = next
			if err != nil || !more {
				return 0, err
			}
			return int64(size), nil
		})
	}
	info.Duration = time.Since(start)
	attrs := []any{slog.Int64("processed", info.Processed), slog.Int64("archived", info.Archived),
		slog.Int64("failed", info.Failed), slog.Int64("keys", info.Keys), slog.Int("batches", info.Batches), slog.Duration("duration", info.Duration)}
	switch {
	case info.Err != nil && ctx.Err() != nil:
		// Stopping: the next leader purges the rest.
	case errors.Is(info.Err, errLeaseLost):
		r.log.Info("scheduled purge stopped", append(attrs, slog.String("reason", info.Err.Error()))...)
	case info.Err != nil:
		r.log.Warn("scheduled purge failed; retrying at the next interval",
			append(attrs, slog.String("error", info.Err.Error()), slog.Duration("retry_in", r.cfg.PurgeInterval))...)
	default:
		r.log.Info("scheduled purge done", attrs...)
	}
	for _, h := range r.purgeHooks {
		r.safeHook(func() { h.OnPurge(ctx, info) })
	}
}

// runDeadLetterRetry gives dead-lettered events without one a retry time
// (DeadLetterRetry from now, by the database clock), then sends those
// whose time came back to pending, each in batches of PurgeBatchSize.
func (r *Relay) runDeadLetterRetry(ctx context.Context, el *leader.Elector) {
	start := time.Now()
	info := DeadLetterRetryInfo{RelayID: r.cfg.RelayID}
	p := driver.DeadLetterRetryParams{After: r.cfg.DeadLetterRetry, MaxRetries: r.cfg.DeadLetterRetries, BatchSize: r.cfg.PurgeBatchSize}
	info.Scheduled, _, info.Err = r.scheduleBatches(ctx, el, p.BatchSize, func(ctx context.Context) (int64, error) {
		return r.drv.ScheduleDeadLetterRetries(ctx, p)
	})
	if info.Err == nil {
		info.Requeued, _, info.Err = r.scheduleBatches(ctx, el, p.BatchSize, func(ctx context.Context) (int64, error) {
			return r.drv.RetryDeadLetters(ctx, p)
		})
	}
	info.Duration = time.Since(start)
	if info.Requeued > 0 {
		r.Wake()
	}
	attrs := []any{slog.Int64("scheduled", info.Scheduled), slog.Int64("requeued", info.Requeued), slog.Duration("duration", info.Duration)}
	switch {
	case info.Err != nil && ctx.Err() != nil:
		return
	case errors.Is(info.Err, errLeaseLost):
		r.log.Info("dead-letter retry stopped", append(attrs, slog.String("reason", info.Err.Error()))...)
	case info.Err != nil:
		r.log.Warn("dead-letter retry failed; retrying later",
			append(attrs, slog.String("error", info.Err.Error()), slog.Duration("retry_in", r.cfg.deadLetterRetryTick()))...)
	case info.Scheduled == 0 && info.Requeued == 0:
		return // nothing to tell: the pass runs often
	default:
		r.log.Info("dead-letter retry", append(attrs, slog.Int("max_retries", r.cfg.DeadLetterRetries))...)
	}
	for _, h := range r.dlqHooks {
		r.safeHook(func() { h.OnDeadLetterRetry(ctx, info) })
	}
}

// isScheduleHook reports whether h implements a scheduled-job hook.
func isScheduleHook(h Hook) bool {
	_, isPurge := h.(HookPurge)
	_, isLease := h.(HookLeaderLease)
	_, isRetry := h.(HookDeadLetterRetry)
	return isPurge || isLease || isRetry
}

// addScheduleHook files h under the scheduled-job hooks it implements.
func (r *Relay) addScheduleHook(h Hook) {
	if p, ok := h.(HookPurge); ok {
		r.purgeHooks = append(r.purgeHooks, p)
	}
	if l, ok := h.(HookLeaderLease); ok {
		r.leaseHooks = append(r.leaseHooks, l)
	}
	if d, ok := h.(HookDeadLetterRetry); ok {
		r.dlqHooks = append(r.dlqHooks, d)
	}
}
