package main_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/pgcluster"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
)

// setupCluster migrates an outbox table on a private cluster the test may
// crash, restart or stop, and returns a bundle on it.
func setupCluster(t *testing.T) (eventsBundle, *pgcluster.Cluster) {
	t.Helper()
	c := pgcluster.Start(t, pgcluster.Options{})
	cfg, err := pgxpool.ParseConfig(c.URL())
	require.NoError(t, err)
	cfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	const schema = "shop"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = pgdriver.Migrate(ctx, pool, schema)
	require.NoError(t, err)
	return eventsBundle{ctx: context.Background(), pool: pool, schema: schema,
		mgr: outbox.NewManager(outbox.Postgres(pool), outbox.ManagerConfig{Schema: schema})}, c
}

// writers commit one event per transaction from several goroutines until
// stopped, and survive a database that goes away: a failed transaction is
// tried again. They know which events were surely committed and which may
// have been (the commit's answer was lost).
type writers struct {
	mu        sync.Mutex
	committed map[string]bool // aggregate IDs whose commit returned nil
	maybe     map[string]bool // aggregate IDs whose commit returned an error
	failures  atomic.Int64
	stop      chan struct{}
	wg        sync.WaitGroup
}

func startWriters(t *testing.T, pool *pgxpool.Pool, schema string, n int) *writers {
	w := &writers{committed: map[string]bool{}, maybe: map[string]bool{}, stop: make(chan struct{})}
	writer := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	for g := range n {
		w.wg.Go(func() {
			for seq := 0; ; seq++ {
				select {
				case <-w.stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", g, seq)
				if err := w.writeOne(pool, writer, id); err != nil {
					w.failures.Add(1)
					select {
					case <-w.stop:
						return
					case <-time.After(50 * time.Millisecond): // a pause before the retry, not a wait for work
					}
				}
			}
		})
	}
	t.Cleanup(w.halt)
	return w
}

func (w *writers) writeOne(pool *pgxpool.Pool, writer *outbox.Writer, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := writer.Write(ctx, tx, outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: id,
		Payload: map[string]string{"id": id}}); err != nil {
		return err
	}
	err = tx.Commit(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.maybe[id] = true
		return err
	}
	w.committed[id] = true
	return nil
}

func (w *writers) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.committed)
}

func (w *writers) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

// aggregateIDs maps the table's event IDs to their aggregate IDs.
func aggregateIDs(t *testing.T, b eventsBundle) map[int64]string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT id, aggregate_id FROM `+testutil.Table(b.schema))
	require.NoError(t, err)
	out := map[int64]string{}
	var (
		id  int64
		agg string
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &agg}, func() error {
		out[id] = agg
		return nil
	})
	require.NoError(t, err)
	return out
}

func TestRelayAndWritersSurviveDatabaseCrashRestart(t *testing.T) {
	t.Parallel()
	b, cluster := setupCluster(t)
	srv := newGateServer(t)
	srv.letThrough()
	p := start(t, nil, "--database-url", cluster.URL(), "--schema", b.schema, "relay", "--sink", srv.URL,
		"--batch-size", "20", "--workers", "2", "--poll-interval", "20ms", "--lease", "5s", "--listen", "--log-level", "warn")
	w := startWriters(t, b.pool, b.schema, 4)
	// The relay is up (a relay that cannot reach its database at start
	// exits, as any command does).
	testutil.WaitFor(t, 30*time.Second, "the relay delivering", func() bool { return len(srv.ackedIDs()) > 0 })

	for round := 1; round <= 2; round++ {
		before := w.count()
		testutil.WaitFor(t, 30*time.Second, "writes flowing", func() bool { return w.count() >= before+100 })
		failures := w.failures.Load()
		cluster.Restart(t) // pg_ctl restart -m immediate
		testutil.WaitFor(t, 60*time.Second, "writes after the restart", func() bool {
			require.False(t, p.exited(), "the relay exited with the database; stderr:\n%s", p.stderr.String())
			return w.count() >= before+200
		})
		require.Greater(t, w.failures.Load(), failures, "round %d: the writers felt the crash", round)
	}
	w.halt()

	// Zero lost: every committed event is delivered, and every delivered
	// event is one that was written (committed, or committed although its
	// commit's answer was lost).
	w.mu.Lock()
	committed, maybe := len(w.committed), len(w.maybe)
	w.mu.Unlock()
	testutil.WaitFor(t, 60*time.Second, "every committed event delivered", func() bool {
		require.False(t, p.exited(), "stderr:\n%s", p.stderr.String())
		s := b.stats(t)
		return s.Pending == 0 && s.Processing == 0 && s.Processed >= int64(committed)
	})
	aggs := aggregateIDs(t, b)
	acked := srv.ackedIDs()
	delivered := map[string]bool{}
	for id := range acked {
		agg, ok := aggs[id]
		require.True(t, ok, "ghost: event %d was delivered but is not in the table", id)
		delivered[agg] = true
	}
	w.mu.Lock()
	for agg := range w.committed {
		require.True(t, delivered[agg], "event %s was committed but never delivered", agg)
	}
	for _, agg := range aggs {
		require.True(t, w.committed[agg] || w.maybe[agg], "event %s is in the table but no writer wrote it", agg)
	}
	w.mu.Unlock()
	s := b.stats(t)
	require.EqualValues(t, len(aggs), s.Processed)
	require.Zero(t, s.Failed)
	// A crash spends no attempt of its own: the only attempts are lease
	// expiries, of a claim that committed while the crash lost its answer
	// (the relay never got those events; the rescue counts the expiry).
	var attempts, expiries int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT coalesce(sum(attempts), 0), coalesce(sum(lease_expiries), 0) FROM `+testutil.Table(b.schema)).Scan(&attempts, &expiries))
	require.Equal(t, expiries, attempts, "database crashes spend no attempts but the lease expiries of claims whose answer was lost; stderr:\n%s", p.stderr.String())
	t.Logf("%d events committed (%d more with a lost commit answer, %d of them in the table), %d webhook deliveries, %d writer failures",
		committed, maybe, len(aggs)-committed, len(acked), w.failures.Load())
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), "stderr:\n%s", p.stderr.String())
}

func TestRelaySIGTERMWithDatabaseDownIsBounded(t *testing.T) {
	t.Parallel()
	b, cluster := setupCluster(t)
	ids := b.writeN(t, 10)
	srv := newGateServer(t) // never opens: the batch stays in flight
	const lease, shutdown = 20 * time.Second, 2 * time.Second
	p := start(t, nil, "--database-url", cluster.URL(), "--schema", b.schema, "relay", "--sink", srv.URL,
		"--batch-size", "10", "--poll-interval", "50ms", "--lease", lease.String(), "--sink-timeout", "10s",
		"--shutdown-timeout", shutdown.String(), "--log-level", "warn")
	srv.waitArrived(t, 10)
	cluster.Crash(t)

	stopped := time.Now()
	code := p.stop(t, syscall.SIGTERM)
	took := time.Since(stopped)
	stderr := p.stderr.String()
	require.Equal(t, 0, code, "stderr:\n%s", stderr)
	require.Less(t, took, shutdown+outbox.StopGrace+3*time.Second,
		"SIGTERM took %v: the releases were retried until the lease ended; stderr:\n%s", took, stderr)
	require.Contains(t, stderr, `msg="relay stopped with events still leased;`)
	require.Contains(t, stderr, "events=10 ")
	require.Contains(t, stderr, "the database did not take the marks or releases")
	require.Contains(t, stderr, "leases_expire_at=")

	cluster.Start(t)
	for _, id := range ids {
		// Left leased, for another relay to take over when the lease ends;
		// or pending, when the crash lost the claim's commit (the relay
		// commits with synchronous_commit off).
		e := b.event(t, id)
		require.Contains(t, []outbox.Status{outbox.StatusProcessing, outbox.StatusPending}, e.Status)
		require.Zero(t, e.Attempts)
	}
}

func TestRelaySurvivesSilentSinkConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := newGateServer(t)
	srv.letThrough()
	proxy := tcpproxy.Start(t, strings.TrimPrefix(srv.URL, "http://"))
	const sinkTimeout = 2 * time.Second
	p := start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", b.schema, "relay",
		"--sink", "http://"+proxy.Addr()+"/hook", "--batch-size", "5", "--poll-interval", "50ms",
		"--lease", "6s", "--sink-timeout", sinkTimeout.String(), "--max-attempts", "1000",
		"--backoff-base", "100ms", "--backoff-max", "2s", "--log-level", "warn")
	first := b.writeN(t, 10)
	testutil.WaitFor(t, 30*time.Second, "the first events delivered", func() bool { return b.stats(t).Processed == 10 })

	proxy.Blackhole()
	silenced := time.Now()
	second := b.writeN(t, 10)
	// A publish on the silent connection gives up after the sink timeout
	// and is retried: the relay is not stuck on it.
	testutil.WaitFor(t, sinkTimeout+10*time.Second, "a publish given up", func() bool {
		for _, id := range second {
			if e := b.event(t, id); e.Attempts > 0 {
				require.Contains(t, e.LastError, "deadline exceeded", "event %d", id)
				return true
			}
		}
		return false
	})
	t.Logf("first publish given up %v after the network went silent", time.Since(silenced).Round(time.Millisecond))
	timer := time.NewTimer(time.Until(silenced.Add(testutil.BlackholeFor(t))))
	<-timer.C
	proxy.Heal()
	healed := time.Now()
	testutil.WaitFor(t, 30*time.Second, "delivery resumed after the heal", func() bool {
		require.False(t, p.exited(), "stderr:\n%s", p.stderr.String())
		s := b.stats(t)
		return s.Processed == 20 && s.Processing == 0
	})
	t.Logf("delivery resumed %v after the heal", time.Since(healed).Round(time.Millisecond))
	acked := srv.ackedIDs()
	for _, id := range append(first, second...) {
		require.GreaterOrEqual(t, acked[id], 1, "event %d lost", id)
	}
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM))
}
