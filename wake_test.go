package outbox_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

// writeWith commits one event through w.
func writeWith(t *testing.T, b relayBundle, w *outbox.Writer) {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = w.Write(b.ctx, tx, outbox.Message{EventType: "woke", Payload: 1})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
}

func TestRelayListenWakesOnNotify(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	appName := "outbox-relay:" + b.schema
	relayPool := testutil.NewPool(t, appName)
	rec := outboxtest.NewRecorder()
	// Without a wake-up this relay would wait an hour between claims.
	startRelay(t, outbox.Postgres(relayPool), b.schema, outbox.RelayConfig{Sink: rec, Listen: true, PollInterval: time.Hour})
	w := outbox.NewWriter(outbox.WriterConfig{Schema: b.schema, NotifyInterval: time.Nanosecond})

	// The listener claims once when it starts; wait until it is listening.
	testutil.WaitFor(t, 10*time.Second, "relay listening", func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, appName).Scan(&n))
		return n == 1
	})
	// Each write comes after the relay's claim 50ms past its last empty
	// one, so only the notification can deliver it.
	for i := range 3 {
		time.Sleep(100 * time.Millisecond)
		writeWith(t, b, w)
		rec.WaitLen(t, i+1, 10*time.Second)
	}

	// A lost listen connection is re-established.
	_, err := b.pool.Exec(b.ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, appName)
	require.NoError(t, err)
	testutil.WaitFor(t, 10*time.Second, "relay listening again", func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%' AND state = 'idle'`, appName).Scan(&n))
		return n == 1
	})
	time.Sleep(100 * time.Millisecond)
	writeWith(t, b, w)
	rec.WaitLen(t, 4, 10*time.Second)
}

func TestWriterNotifyIsDebounced(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	conn, err := pgx.Connect(b.ctx, testutil.DatabaseURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(b.ctx, `LISTEN outbox_events`)
	require.NoError(t, err)

	w := outbox.NewWriter(outbox.WriterConfig{Schema: b.schema, NotifyInterval: time.Hour})
	for range 5 {
		writeWith(t, b, w)
	}
	// A writer without an interval never notifies.
	silent := outbox.NewWriter(outbox.WriterConfig{Schema: b.schema})
	writeWith(t, b, silent)

	got := 0
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 500*time.Millisecond)
		n, err := conn.WaitForNotification(ctx)
		cancel()
		if err != nil {
			break
		}
		if n.Payload == b.schema {
			got++
		}
	}
	require.Equal(t, 1, got, "one notification per interval")
	require.EqualValues(t, 6, b.stats(t).Pending)
}

func TestRelayTrailingClaimPicksUpUnnotifiedEvents(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	rec := outboxtest.NewRecorder()
	r := b.start(t, outbox.RelayConfig{Sink: rec, PollInterval: time.Hour})
	// The relay's first claim finds nothing; wake it for the first event
	// only, and write the rest without waking it while it is busy.
	gate := make(chan struct{})
	rec.SetFail(func(outbox.Event) error { <-gate; return nil })
	b.write(t, 1, nil)
	r.Wake()
	b.write(t, 2, nil)
	close(gate)
	rec.WaitLen(t, 3, 10*time.Second)
}

// claimSpan is one claim statement as the relay's connection saw it.
type claimSpan struct {
	start, end time.Time
	rows       int64
	err        error
}

// claimTracer records the claims a relay's pool runs (pgx.QueryTracer): the
// claim is the one statement that sets status = 'processing'. Should the
// claim's SQL change so that nothing matches, the test fails waiting for
// the relay's first claim rather than passing on no claims. beforeClaim,
// when set, is called as each claim starts, with the claims that ended
// before it in the order they ended; it may hold the claim back.
type claimTracer struct {
	beforeClaim func(ended []claimSpan)
	mu          sync.Mutex
	claims      []claimSpan
}

type claimStartKey struct{}

func (c *claimTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(data.SQL, "SET status = 'processing'") {
		return ctx
	}
	if c.beforeClaim != nil {
		c.mu.Lock()
		ended := slices.Clone(c.claims)
		c.mu.Unlock()
		c.beforeClaim(ended)
	}
	return context.WithValue(ctx, claimStartKey{}, time.Now())
}

// tracedPool returns a pool on the test database whose connections report
// to tracer.
func tracedPool(t *testing.T, tracer pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testutil.DatabaseURL())
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func (c *claimTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	start, ok := ctx.Value(claimStartKey{}).(time.Time)
	if !ok {
		return
	}
	end := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claims = append(c.claims, claimSpan{start: start, end: end, rows: data.CommandTag.RowsAffected(), err: data.Err})
}

// spans returns the claims recorded so far, in the order they started.
func (c *claimTracer) spans() []claimSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.claims)
	slices.SortFunc(out, func(a, b claimSpan) int { return a.start.Compare(b.start) })
	return out
}

// While events trickle in, the claim loops take turns: after a claim that
// found events but not a full batch, the next claim of the whole relay (any
// loop's) starts no sooner than the trailing delay (5ms) after it ended,
// instead of every loop claiming on its own timer. The test checks that
// ordering on every claim, as the relay's own connections saw them, so it
// does not depend on how fast the machine writes: a slow machine only makes
// the gaps longer. Four writers wake the relay after every commit, so
// events arrive faster than one per delay and loops claiming on their own
// would start claims inside each other's delay (or overlap them).
func TestRelayLoopsTakeTurnsUnderLightTraffic(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	tracer := &claimTracer{}
	relayPool := tracedPool(t, tracer)

	rec := outboxtest.NewRecorder()
	const (
		writers   = 4
		perWriter = 40
		events    = writers * perWriter
		// trailingClaimDelay in relay.go.
		delay = 5 * time.Millisecond
	)
	// A batch never fills (a full claim lets every loop claim at once).
	r := startRelay(t, outbox.Postgres(relayPool), b.schema, outbox.RelayConfig{Sink: rec, Workers: 4,
		BatchSize: 10 * events, PollInterval: time.Hour})
	// Write once the relay has claimed, so the events trickle into a
	// running relay rather than waiting for its first claim as a backlog.
	testutil.WaitFor(t, 10*time.Second, "the relay's first claim", func() bool { return len(tracer.spans()) > 0 })
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			for range perWriter {
				tx, err := b.pool.Begin(b.ctx)
				if err == nil {
					_, err = b.writer.Write(b.ctx, tx, outbox.Message{EventType: "trickle", Payload: 1})
					if err == nil {
						err = tx.Commit(b.ctx)
					}
					_ = tx.Rollback(b.ctx)
				}
				if err != nil {
					errs <- err
					return
				}
				r.Wake()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	rec.WaitLen(t, events, 30*time.Second)

	claims := tracer.spans()
	checked := 0
	for i, c := range claims[:len(claims)-1] {
		if c.err != nil || c.rows == 0 {
			continue // after an error or an empty claim a wake-up may claim at once
		}
		next := claims[i+1]
		require.GreaterOrEqual(t, next.start.Sub(c.end), delay,
			"claim %d (%d events) ended at +%v and claim %d started at +%v, within the trailing delay: the loops claim on their own",
			i, c.rows, c.end.Sub(claims[0].start), i+1, next.start.Sub(claims[0].start))
		checked++
	}
	t.Logf("%d events, %d claims, %d of them found events and were checked", events, len(claims), checked)
	require.Positive(t, checked, "no claim found events")
}

// A write that did not wake the relay (a writer's wake-ups are debounced
// when it writes) and commits after the trailing claim is found by the
// claim 50ms after that empty claim, not by the poll, an hour away here.
// The tracer holds that claim until the late transaction has committed, so
// the test does not depend on how fast the machine runs.
func TestRelayClaimsOnceMoreForALateCommit(t *testing.T) {
	t.Parallel()
	b := setupRelay(t)
	// The claim after a claim that found events and one that found
	// nothing tells the test through straggler and waits for release.
	straggler, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	tracer := &claimTracer{beforeClaim: func(ended []claimSpan) {
		ended = slices.DeleteFunc(ended, func(c claimSpan) bool { return c.err != nil })
		n := len(ended)
		if n >= 2 && ended[n-2].rows > 0 && ended[n-1].rows == 0 && held.CompareAndSwap(false, true) {
			close(straggler)
			<-release
		}
	}}
	relayPool := tracedPool(t, tracer)
	rec := outboxtest.NewRecorder()
	r := startRelay(t, outbox.Postgres(relayPool), b.schema, outbox.RelayConfig{Sink: rec, PollInterval: time.Hour})

	late, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = late.Rollback(context.Background()) })
	_, err = b.writer.Write(b.ctx, late, outbox.Message{EventType: "late", Payload: 1})
	require.NoError(t, err)
	b.write(t, 1, nil)
	r.Wake()
	rec.WaitLen(t, 1, 10*time.Second)

	select {
	case <-straggler:
	case <-time.After(10 * time.Second):
		t.Fatal("no claim after the trailing claim found nothing: a late commit waits for the poll")
	}
	require.NoError(t, late.Commit(b.ctx))
	close(release)
	rec.WaitLen(t, 2, 10*time.Second)
}
