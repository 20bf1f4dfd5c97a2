package outbox_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/pgcluster"
	"github.com/outboxkit/outbox/outboxtest"
)

// logBuffer collects a logger's text output from several goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// dumpOnFailure logs what was collected if t fails.
func (l *logBuffer) dumpOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay log:\n%s", l.String())
		}
	})
}

// hasLine reports whether one line of the log contains every one of subs.
func (l *logBuffer) hasLine(subs ...string) bool {
	for line := range strings.Lines(l.String()) {
		found := true
		for _, s := range subs {
			found = found && strings.Contains(line, s)
		}
		if found {
			return true
		}
	}
	return false
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// clusterBundle is an outbox table on a private cluster the test can crash,
// stop or make read-only.
type clusterBundle struct {
	relayBundle
	cluster *pgcluster.Cluster
}

func setupCluster(t *testing.T) clusterBundle {
	t.Helper()
	c := pgcluster.Start(t, pgcluster.Options{})
	cfg, err := pgxpool.ParseConfig(c.URL())
	require.NoError(t, err)
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	const schema = "app"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = pgdriver.Migrate(ctx, pool, schema)
	require.NoError(t, err)
	db := outbox.Postgres(pool)
	return clusterBundle{cluster: c, relayBundle: relayBundle{
		ctx: context.Background(), pool: pool, db: db, schema: schema,
		mgr:    outbox.NewManager(db, outbox.ManagerConfig{Schema: schema}),
		writer: outbox.NewWriter(outbox.WriterConfig{Schema: schema}),
	}}
}

// writeRW commits n events in a transaction that is read-write even when
// the database's default is read-only.
func (b clusterBundle) writeRW(t *testing.T, n int) []int64 {
	t.Helper()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{EventType: "thing.happened", AggregateType: "thing", AggregateID: fmt.Sprint(i), Payload: map[string]int{"i": i}}
	}
	var ids []int64
	err := pgx.BeginTxFunc(b.ctx, b.pool, pgx.TxOptions{AccessMode: pgx.ReadWrite}, func(tx pgx.Tx) error {
		res, err := b.writer.Write(b.ctx, tx, msgs...)
		ids = res.IDs
		return err
	})
	require.NoError(t, err)
	return ids
}

// setReadOnly makes every session of the cluster read-only by default, as
// a demoted primary is, or writable again; sessions already open follow at
// their next statement.
func (b clusterBundle) setReadOnly(t *testing.T, on bool) {
	t.Helper()
	if on {
		b.cluster.Exec(t, `ALTER SYSTEM SET default_transaction_read_only = on`)
	} else {
		b.cluster.Exec(t, `ALTER SYSTEM RESET default_transaction_read_only`)
	}
	b.cluster.Exec(t, `SELECT pg_reload_conf()`)
	// A new session sees the setting once the postmaster has re-read the
	// configuration, and by then it has signalled every open session.
	want := map[bool]string{true: "on", false: "off"}[on]
	testutil.WaitFor(t, 10*time.Second, "the reload", func() bool {
		conn, err := pgx.Connect(b.ctx, b.cluster.URL())
		require.NoError(t, err)
		defer conn.Close(b.ctx)
		var got string
		require.NoError(t, conn.QueryRow(b.ctx, `SHOW default_transaction_read_only`).Scan(&got))
		return got == want
	})
}

func (b clusterBundle) attempts(t *testing.T) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT coalesce(sum(attempts), 0) FROM `+testutil.Table(b.schema)).Scan(&n))
	return n
}

func TestRelayWaitsOutReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	b := setupCluster(t)
	logs := &logBuffer{}
	logs.dumpOnFailure(t)
	rec := outboxtest.NewRecorder()
	var demote sync.Once
	sink := outbox.SinkFunc(func(ctx context.Context, events []outbox.Event) []error {
		// The primary is demoted between the publish and the mark.
		demote.Do(func() { b.setReadOnly(t, true) })
		return rec.Publish(ctx, events)
	})
	first := b.writeRW(t, 5)
	b.start(t, outbox.RelayConfig{Sink: sink, Logger: logs.logger()})

	const waiting = `msg="database is read-only (demoted primary?); waiting"`
	testutil.WaitFor(t, 30*time.Second, "the mark's read-only warning", func() bool {
		return logs.hasLine(waiting, `operation="mark processed"`)
	})
	require.Contains(t, logs.String(), "SQLSTATE 25006", "the database's own error is kept")
	s := b.stats(t)
	require.EqualValues(t, 5, s.Processing, "the published batch stays leased while its mark waits")
	b.setReadOnly(t, false)
	b.waitStats(t, "the waiting mark lands", func(s outbox.Stats) bool { return s.Processed == 5 })

	// Demoted again: claims wait instead of failing.
	b.setReadOnly(t, true)
	second := b.writeRW(t, 10)
	testutil.WaitFor(t, 30*time.Second, "the claim's read-only warning", func() bool {
		return logs.hasLine(waiting, `operation=claim`)
	})
	s = b.stats(t)
	require.EqualValues(t, 10, s.Pending)
	require.EqualValues(t, 5, s.Processed)
	b.setReadOnly(t, false)
	b.waitStats(t, "claims resume on a writable database", func(s outbox.Stats) bool { return s.Processed == 15 })

	require.Zero(t, b.attempts(t), "a read-only database spends no attempts")
	seen := map[int64]int{}
	for _, e := range rec.Events() {
		seen[e.ID]++
	}
	for _, id := range append(first, second...) {
		require.Equal(t, 1, seen[id], "event %d: the mark was retried, not given up", id)
	}
	require.Contains(t, logs.String(), `msg="claims resumed"`)
	require.NotContains(t, logs.String(), "abandoned")
}

// ignoringSink blocks in Publish until released, whatever its context says.
type ignoringSink struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *ignoringSink) Publish(_ context.Context, events []outbox.Event) []error {
	s.once.Do(func() { close(s.started) })
	<-s.release
	return make([]error, len(events))
}

func TestRelayStopIsBoundedWhenSinkIgnoresContext(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	b.write(t, 10, nil)
	sink := &ignoringSink{started: make(chan struct{}), release: make(chan struct{})}
	logs := &logBuffer{}
	logs.dumpOnFailure(t)
	r, err := outbox.NewRelay(b.db, outbox.RelayConfig{Sink: sink, Schema: b.schema, Lease: 20 * time.Second,
		PollInterval: 20 * time.Millisecond, Logger: logs.logger()})
	require.NoError(t, err)
	require.NoError(t, r.Start(b.ctx))
	released := false
	defer func() {
		if !released {
			close(sink.release)
		}
	}()
	<-sink.started

	const timeout = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	begin := time.Now()
	require.ErrorIs(t, r.Stop(ctx), context.DeadlineExceeded)
	took := time.Since(begin)
	require.Less(t, took, timeout+outbox.StopGrace+2*time.Second, "Stop waited for a sink that ignores its context")
	out := logs.String()
	require.Contains(t, out, `msg="relay stopped with events still leased;`)
	require.Contains(t, out, "events=10 ")
	require.Contains(t, out, "publishing=10 ")
	require.Contains(t, out, "the sink did not return from publishing after it was cancelled")
	require.Contains(t, out, "leases_expire_at=")
	require.EqualValues(t, 10, b.stats(t).Processing, "the lease is kept until it ends: the publish may still land")

	err = r.Start(b.ctx)
	require.ErrorContains(t, err, "relay: still stopping", "no second run while the first one's publish is running")

	// The sink returns at last: the goroutines end, and the relay can run again.
	close(sink.release)
	released = true
	testutil.WaitFor(t, 20*time.Second, "the relay can start again", func() bool { return r.Start(b.ctx) == nil })
	stopCtx, cancelStop := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelStop()
	require.NoError(t, r.Stop(stopCtx))
}

func TestRelayStopIsBoundedWhenDatabaseIsDown(t *testing.T) {
	t.Parallel()
	b := setupCluster(t)
	ids := b.writeRW(t, 10)
	sink := newBlockingSink()
	logs := &logBuffer{}
	logs.dumpOnFailure(t)
	const lease = 20 * time.Second
	r, err := outbox.NewRelay(b.db, outbox.RelayConfig{Sink: sink, Schema: b.schema, Lease: lease,
		PollInterval: 20 * time.Millisecond, Logger: logs.logger()})
	require.NoError(t, err)
	require.NoError(t, r.Start(b.ctx))
	<-sink.started
	b.cluster.Crash(t)
	close(sink.release) // published; the marks meet a database that is gone

	const timeout = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	begin := time.Now()
	require.ErrorIs(t, r.Stop(ctx), context.DeadlineExceeded)
	took := time.Since(begin)
	require.Less(t, took, timeout+outbox.StopGrace+2*time.Second, "Stop retried the marks until the lease ended")
	out := logs.String()
	require.Contains(t, out, `msg="relay stopped with events still leased;`)
	require.Contains(t, out, "events=10 ")
	require.Contains(t, out, "unsettled=10 ")
	require.Contains(t, out, "the database did not take the marks or releases")
	require.Contains(t, out, "mark processed abandoned: the relay stopped before the database took it")

	b.cluster.Start(t)
	for _, id := range ids {
		e, err := b.mgr.Event(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, outbox.StatusProcessing, e.Status, "leased until the lease ends, then rescued")
		require.Zero(t, e.Attempts)
	}
}

func TestRelayRecoversFromHalfOpenDatabase(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	// The relay reaches PostgreSQL through a proxy that will go silent.
	cfg, proxy := testutil.ProxiedPoolConfig(t)
	relayID := "half-open-" + b.schema[len(b.schema)-8:]
	outbox.ConfigureRelayPool(cfg, relayID)
	relayPool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(relayPool.Close)

	rec := outboxtest.NewRecorder()
	logs := &logBuffer{}
	logs.dumpOnFailure(t)
	startRelay(t, outbox.Postgres(relayPool), b.schema, outbox.RelayConfig{Sink: rec, Workers: 2, Lease: 10 * time.Second,
		PollInterval: 200 * time.Millisecond, Listen: true, Logger: logs.logger()})
	writer := outbox.NewWriter(outbox.WriterConfig{Schema: b.schema, NotifyInterval: outbox.NotifyIntervalDefault})
	write := func(n int) {
		msgs := make([]outbox.Message, n)
		for i := range msgs {
			msgs[i] = outbox.Message{EventType: "thing.happened", AggregateType: "thing", AggregateID: fmt.Sprint(i), Payload: map[string]int{"i": i}}
		}
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, err := writer.Write(b.ctx, tx, msgs...)
			return err
		}))
	}
	write(20)
	b.waitStats(t, "the first events processed", func(s outbox.Stats) bool { return s.Processed == 20 })
	// Idle: LISTEN has run, so the blackhole below silences a listening
	// connection (one that falls silent before LISTEN's reply is
	// TestListenGivesUpOnASilentConnection in pgdriver).
	testutil.WaitFor(t, 20*time.Second, "the relay listening", func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%' AND state = 'idle'`,
			"outbox-relay:"+relayID).Scan(&n))
		return n == 1
	})

	proxy.Blackhole()
	silence := testutil.BlackholeFor(t)
	write(20) // committed while the relay cannot see the database
	timer := time.NewTimer(silence)
	<-timer.C
	proxy.Heal()
	healed := time.Now()
	// The relay's calls on the dead connections time out (DBTimeout, 5s
	// here) and are retried on new ones; the claim loops back off at most
	// 5s between failed claims.
	b.waitStats(t, "delivery resumed", func(s outbox.Stats) bool { return s.Processed == 40 })
	t.Logf("delivery resumed %v after the heal (blackhole %v)", time.Since(healed).Round(time.Millisecond), silence)
	require.Contains(t, logs.String(), "claim failed; retrying")

	// The LISTEN connection went silent too: its check notices, and it
	// is replaced. (Should the server have set the state idle just before
	// flushing LISTEN's reply, and the blackhole come between the two, it
	// is LISTEN that times out instead.)
	testutil.WaitFor(t, 30*time.Second, "the silent LISTEN connection noticed", func() bool {
		out := logs.String()
		return strings.Contains(out, "the LISTEN connection stopped answering") || strings.Contains(out, "LISTEN failed")
	})
	write(5)
	b.waitStats(t, "all processed", func(s outbox.Stats) bool { return s.Processed == 45 && s.Processing == 0 })
	seen := map[int64]bool{}
	for _, e := range rec.Events() {
		seen[e.ID] = true
	}
	require.Len(t, seen, 45, "every event published")
	var attempts int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT coalesce(sum(attempts), 0) FROM `+testutil.Table(b.schema)).Scan(&attempts))
	require.Zero(t, attempts, "a silent network spends no attempts")
}
