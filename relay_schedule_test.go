package outbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

// scheduleRecorder records the scheduled-job hooks of one relay.
type scheduleRecorder struct {
	mu      sync.Mutex
	leases  []bool
	purges  []outbox.PurgeInfo
	retries []outbox.DeadLetterRetryInfo
}

func (s *scheduleRecorder) OnLeaderLease(_ context.Context, l outbox.LeaderLeaseInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leases = append(s.leases, l.Leader)
}

func (s *scheduleRecorder) OnPurge(_ context.Context, p outbox.PurgeInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purges = append(s.purges, p)
}

func (s *scheduleRecorder) OnDeadLetterRetry(_ context.Context, d outbox.DeadLetterRetryInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retries = append(s.retries, d)
}

func (s *scheduleRecorder) leader() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leases) > 0 && s.leases[len(s.leases)-1]
}

func (s *scheduleRecorder) purgeRuns() []outbox.PurgeInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]outbox.PurgeInfo(nil), s.purges...)
}

func (s *scheduleRecorder) requeued() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, r := range s.retries {
		n += r.Requeued
	}
	return n
}

func newScheduledRelay(t *testing.T, b relayBundle, id string, cfg outbox.RelayConfig) (*outbox.Relay, *scheduleRecorder) {
	t.Helper()
	rec := &scheduleRecorder{}
	cfg.RelayID = id
	cfg.Schema = b.schema
	cfg.PollInterval = 20 * time.Millisecond
	cfg.Hooks = append(cfg.Hooks, rec)
	if cfg.Sink == nil {
		cfg.Sink = outboxtest.NewRecorder()
	}
	r, err := outbox.NewRelay(b.db, cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
	return r, rec
}

func (b relayBundle) leaseHolder(t *testing.T) string {
	t.Helper()
	var holder string
	err := b.pool.QueryRow(b.ctx, `SELECT holder FROM `+pgx.Identifier{b.schema, "outbox_leases"}.Sanitize()+
		` WHERE name = 'scheduled_jobs' AND expires_at > now()`).Scan(&holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	require.NoError(t, err)
	return holder
}

func TestRelayScheduleElectsOneLeader(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	cfg := outbox.RelayConfig{PurgeAfter: 7 * 24 * time.Hour, PurgeInterval: 50 * time.Millisecond, ScheduleLease: time.Second}
	ra, a := newScheduledRelay(t, b, "relay-a", cfg)
	rb, c := newScheduledRelay(t, b, "relay-b", cfg)

	testutil.WaitFor(t, 10*time.Second, "a leader is elected", func() bool { return a.leader() || c.leader() })
	lead, follow, leadRelay, followID := a, c, ra, "relay-b"
	if c.leader() {
		lead, follow, leadRelay, followID = c, a, rb, "relay-a"
	}
	require.Equal(t, leadRelay.ID(), b.leaseHolder(t))
	testutil.WaitFor(t, 10*time.Second, "the leader purges on its schedule", func() bool { return len(lead.purgeRuns()) >= 5 })
	require.False(t, follow.leader(), "exactly one leader")
	require.Empty(t, follow.purgeRuns(), "the follower never purges while the leader runs")

	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, leadRelay.Stop(ctx))
	require.False(t, lead.leader(), "a stopping relay reports it gave the lease up")
	testutil.WaitFor(t, 10*time.Second, "the other relay takes over", func() bool { return follow.leader() })
	require.Equal(t, followID, b.leaseHolder(t))
	testutil.WaitFor(t, 10*time.Second, "the new leader purges", func() bool { return len(follow.purgeRuns()) >= 2 })
}

func TestRelaySchedulePurgesOldEventsInBatches(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	ids := b.write(t, 10, nil)
	future := b.write(t, 2, func(_ int, m *outbox.Message) { m.Delay = time.Hour })
	failed := b.write(t, 1, nil)
	_, err := b.mgr.Discard(b.ctx, "broken", failed...)
	require.NoError(t, err)

	// Deliver everything due, then age 7 of the processed events and the
	// dead-lettered one past the cutoff.
	rec := outboxtest.NewRecorder()
	r := startRelay(t, b.db, b.schema, outbox.RelayConfig{Sink: rec})
	b.waitStats(t, "delivered", func(s outbox.Stats) bool { return s.Processed == 10 })
	require.NoError(t, r.Stop(b.ctx))
	table := pgx.Identifier{b.schema, "outbox_events"}.Sanitize()
	_, err = b.pool.Exec(b.ctx, `UPDATE `+table+` SET processed_at = now() - interval '8 days' WHERE id = ANY($1)`, ids[:7])
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE `+table+` SET updated_at = now() - interval '8 days' WHERE id = ANY($1)`, failed)
	require.NoError(t, err)

	_, s := newScheduledRelay(t, b, "purger", outbox.RelayConfig{
		PurgeAfter: 7 * 24 * time.Hour, PurgeInterval: time.Hour, PurgeBatchSize: 3,
	})
	testutil.WaitFor(t, 10*time.Second, "the leader purged once", func() bool { return len(s.purgeRuns()) == 1 })
	run := s.purgeRuns()[0]
	require.NoError(t, run.Err)
	require.EqualValues(t, 7, run.Processed)
	require.Equal(t, 4, run.Batches, "7 processed rows in batches of 3 (3, 3, 1), then one archive batch that finds none")
	require.Zero(t, run.Failed, "dead-lettered events are kept without PurgeFailedAfter")

	st := b.stats(t)
	require.EqualValues(t, 3, st.Processed, "the young processed events stay")
	require.EqualValues(t, 2, st.Pending, "pending events stay")
	require.EqualValues(t, 1, st.Failed)
	for _, id := range ids[:7] {
		_, err := b.mgr.Event(b.ctx, id)
		require.ErrorIs(t, err, outbox.ErrNotFound)
	}
	for _, id := range append(ids[7:], future...) {
		_, err := b.mgr.Event(b.ctx, id)
		require.NoError(t, err)
	}
}

// failingSink fails every publish and records when each event was
// published.
type failingSink struct {
	mu    sync.Mutex
	times map[int64][]time.Time
}

func (s *failingSink) Publish(_ context.Context, events []outbox.Event) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := make([]error, len(events))
	for i, e := range events {
		s.times[e.ID] = append(s.times[e.ID], time.Now())
		errs[i] = errors.New("receiver refuses it")
	}
	return errs
}

func (s *failingSink) publishes(id int64) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.times[id]...)
}

func TestRelayDeadLetterRetryRequeuesAtMostNTimes(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	id := b.write(t, 1, nil)[0]
	sink := &failingSink{times: map[int64][]time.Time{}}
	_, rec := newScheduledRelay(t, b, "retrier", outbox.RelayConfig{
		Sink: sink, MaxAttempts: 2, BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		DeadLetterRetry: time.Second, DeadLetterRetries: 2,
	})

	// Two attempts per cycle (MaxAttempts), three cycles: the first and
	// two slow retries, each with its attempts reset.
	testutil.WaitFor(t, 20*time.Second, "two slow retries", func() bool { return rec.requeued() == 2 })
	b.waitStats(t, "dead-lettered for good", func(s outbox.Stats) bool { return s.Failed == 1 && len(sink.publishes(id)) == 6 })
	times := sink.publishes(id)
	for _, cycle := range []int{2, 4} {
		gap := times[cycle].Sub(times[cycle-1])
		require.GreaterOrEqual(t, gap, 900*time.Millisecond, "a slow retry waits out DeadLetterRetry, not the fast backoff (publish %d)", cycle)
	}
	e, err := b.mgr.Event(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, outbox.StatusFailed, e.Status)
	require.Equal(t, 2, e.Attempts, "the last cycle spent its own attempts")

	// Out of slow retries: a later event's first slow retry (a full
	// DeadLetterRetry after its dead-lettering) brings no fourth cycle.
	st, err := b.mgr.DeadLetterRetryStats(b.ctx)
	require.NoError(t, err)
	require.Zero(t, st.Waiting)
	later := b.write(t, 1, nil)[0]
	testutil.WaitFor(t, 20*time.Second, "the later event's first slow retry", func() bool { return len(sink.publishes(later)) >= 3 })
	require.Len(t, sink.publishes(id), 6, "no fourth cycle")
}

func TestRelayScheduleConfig(t *testing.T) {
	t.Parallel()
	db := outbox.Postgres(nil)
	sink := outboxtest.NewRecorder()
	cases := []struct {
		cfg   outbox.RelayConfig
		field string
	}{
		{outbox.RelayConfig{Sink: sink, PurgeAfter: -time.Hour}, "PurgeAfter"},
		{outbox.RelayConfig{Sink: sink, PurgeFailedAfter: -time.Hour}, "PurgeFailedAfter"},
		{outbox.RelayConfig{Sink: sink, DeadLetterRetry: -time.Hour}, "DeadLetterRetry"},
		{outbox.RelayConfig{Sink: sink, DeadLetterRetry: time.Hour, DeadLetterRetries: -1}, "DeadLetterRetries"},
		{outbox.RelayConfig{Sink: sink, PurgeAfter: time.Hour, PurgeInterval: -time.Second}, "PurgeInterval"},
		{outbox.RelayConfig{Sink: sink, PurgeAfter: time.Hour, ScheduleLease: time.Millisecond}, "ScheduleLease"},
	}
	for _, c := range cases {
		_, err := outbox.NewRelay(db, c.cfg)
		var ce *outbox.ConfigError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, c.field, ce.Field, err.Error())
	}
	off := outbox.RelayConfig{Sink: sink}.WithDefaults()
	require.Zero(t, off.PurgeInterval, "no scheduled job, no schedule defaults")
	on := outbox.RelayConfig{Sink: sink, DeadLetterRetry: time.Hour}.WithDefaults()
	require.Equal(t, outbox.PurgeIntervalDefault, on.PurgeInterval)
	require.Equal(t, outbox.DeadLetterRetriesDefault, on.DeadLetterRetries)
	require.Equal(t, outbox.ScheduleLeaseDefault, on.ScheduleLease)
	require.Equal(t, outbox.PurgeBatchSizeDefault, on.PurgeBatchSize)
	require.NoError(t, on.Validate())
}

// TestRelayScheduleRefusesOldSchema: a relay with scheduled jobs refuses a
// schema migrated before outbox_leases (version 4) with a line that says
// what to run; without scheduled jobs it delivers as before, and the stats
// report no slow retries instead of failing.
func TestRelayScheduleRefusesOldSchema(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	// Undo migration 5.
	_, err := b.pool.Exec(b.ctx, `ALTER TABLE `+pgx.Identifier{b.schema, "outbox_events"}.Sanitize()+`
		DROP COLUMN dead_letter_retries, DROP COLUMN dead_letter_retry_at;
		DROP TABLE `+pgx.Identifier{b.schema, "outbox_leases"}.Sanitize()+`;
		DELETE FROM `+pgx.Identifier{b.schema, "outbox_migrations"}.Sanitize()+` WHERE version >= 5`)
	require.NoError(t, err)
	r, err := outbox.NewRelay(b.db, outbox.RelayConfig{Sink: outboxtest.NewRecorder(), Schema: b.schema, PurgeAfter: time.Hour})
	require.NoError(t, err)
	err = r.Start(b.ctx)
	require.ErrorContains(t, err, "need schema version 5")
	require.ErrorContains(t, err, "is at 4: run outbox migrate")

	b.write(t, 3, nil)
	startRelay(t, b.db, b.schema, outbox.RelayConfig{Sink: outboxtest.NewRecorder()})
	b.waitStats(t, "delivered on schema version 4", func(s outbox.Stats) bool { return s.Processed == 3 })
	require.Equal(t, outbox.DeadLetterRetryStats{}, b.stats(t).DeadLetterRetry)
}
