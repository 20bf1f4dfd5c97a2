package outboxprom

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	dbtest "github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

func TestScheduleHooks(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := New(Config{Registerer: reg, Sink: "s"})
	require.NoError(t, err)
	l := map[string]string{"schema": outbox.SchemaDefault, "sink": "s"}
	with := func(k, v string) map[string]string {
		out := map[string]string{k: v}
		for lk, lv := range l {
			out[lk] = lv
		}
		return out
	}
	f := families(t, reg)
	require.Zero(t, counter(t, f, "outbox_purge_deleted_total", with("status", "processed")), "present from the start")
	require.Zero(t, series(f, "outbox_purge_last_success_timestamp_seconds", l).GetGauge().GetValue())

	ctx := context.Background()
	m.OnLeaderLease(ctx, outbox.LeaderLeaseInfo{Leader: true})
	m.OnPurge(ctx, outbox.PurgeInfo{Processed: 7, Archived: 2, Failed: 1})
	m.OnPurge(ctx, outbox.PurgeInfo{Processed: 3, Err: errors.New("timeout")})
	m.OnDeadLetterRetry(ctx, outbox.DeadLetterRetryInfo{Scheduled: 4, Requeued: 2})
	f = families(t, reg)
	require.Equal(t, 10.0, counter(t, f, "outbox_purge_deleted_total", with("status", "processed")), "rows a failed run deleted count too")
	require.Equal(t, 2.0, counter(t, f, "outbox_purge_deleted_total", with("status", "archived")))
	require.Equal(t, 1.0, counter(t, f, "outbox_purge_deleted_total", with("status", "failed")))
	require.Equal(t, 1.0, counter(t, f, "outbox_purge_errors_total", l))
	require.InDelta(t, float64(time.Now().Unix()), series(f, "outbox_purge_last_success_timestamp_seconds", l).GetGauge().GetValue(), 5)
	require.Equal(t, 1.0, series(f, "outbox_scheduled_job_leader", l).GetGauge().GetValue())
	require.Equal(t, 2.0, counter(t, f, "outbox_dead_letter_retried_total", l))

	m.OnLeaderLease(ctx, outbox.LeaderLeaseInfo{Leader: false})
	require.Zero(t, series(families(t, reg), "outbox_scheduled_job_leader", l).GetGauge().GetValue())
}

// TestScheduleMetricsFromARelay: a relay with a scheduled purge and the
// metrics as its hook reports leadership and a successful purge, and the
// table gauges show the slow retries waiting.
func TestScheduleMetricsFromARelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m, err := New(Config{Registerer: b.reg, Manager: b.mgr, Schema: b.schema, Sink: "rec", SampleInterval: time.Millisecond})
	require.NoError(t, err)
	b.write(t, "order.created")
	table := pgx.Identifier{b.schema, "outbox_events"}.Sanitize()
	_, err = b.pool.Exec(b.ctx, `UPDATE `+table+` SET status = 'failed', dead_letter_retry_at = timestamptz '2031-01-01Z'`)
	require.NoError(t, err)

	b.startRelay(t, outbox.RelayConfig{Sink: outboxtest.NewRecorder(), PurgeAfter: time.Hour, Hooks: []outbox.Hook{m}})
	l := map[string]string{"schema": b.schema, "sink": "rec"}
	dbtest.WaitFor(t, 20*time.Second, "leader with a purge", func() bool {
		f := families(t, b.reg)
		return series(f, "outbox_scheduled_job_leader", l).GetGauge().GetValue() == 1 &&
			series(f, "outbox_purge_last_success_timestamp_seconds", l).GetGauge().GetValue() > 0
	})
	f := families(t, b.reg)
	tl := map[string]string{"schema": b.schema}
	require.Equal(t, 1.0, series(f, "outbox_dead_letter_retry_waiting", tl).GetGauge().GetValue())
	require.Equal(t, float64(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC).Unix()),
		series(f, "outbox_dead_letter_retry_next_due_timestamp_seconds", tl).GetGauge().GetValue())
}

// outbox_blocked_aggregates counts the keys whose ordered delivery waits
// behind a dead first event.
func TestBlockedAggregatesGauge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := New(Config{Registerer: b.reg, Manager: b.mgr, Schema: b.schema, Sink: "rec", SampleInterval: time.Millisecond})
	require.NoError(t, err)
	b.write(t, "order.created")
	b.write(t, "order.created")
	table := pgx.Identifier{b.schema, "outbox_events"}.Sanitize()
	_, err = b.pool.Exec(b.ctx, `UPDATE `+table+` SET aggregate_type = 'order', aggregate_id = 'o-1'`)
	require.NoError(t, err)
	tl := map[string]string{"schema": b.schema}
	require.Equal(t, 0.0, series(families(t, b.reg), "outbox_blocked_aggregates", tl).GetGauge().GetValue())
	_, err = b.pool.Exec(b.ctx, `UPDATE `+table+` SET status = 'failed' WHERE id = (SELECT min(id) FROM `+table+`)`)
	require.NoError(t, err)
	dbtest.WaitFor(t, 10*time.Second, "one blocked aggregate", func() bool {
		return series(families(t, b.reg), "outbox_blocked_aggregates", tl).GetGauge().GetValue() == 1
	})
}
