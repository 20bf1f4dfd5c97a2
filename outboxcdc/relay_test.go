package outboxcdc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/pgcluster"
	"github.com/outboxkit/outbox/outboxcdc"
	"github.com/outboxkit/outbox/outboxtest"
)

// TestCapture runs the capture tests on one private cluster with
// wal_level = logical (a schema, and so a slot, per test): starting a
// cluster costs seconds.
func TestCapture(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{Settings: map[string]string{
		"wal_level": "logical", "max_replication_slots": "40", "max_wal_senders": "40", "max_connections": "200",
		"wal_sender_timeout": "10s",
	}})
	for name, test := range map[string]func(*testing.T, string){
		"DeliversCommitsInCommitOrderAndMarksRows": testDeliversInCommitOrder,
		"FailedPublishFallsBackToTablePath":        testFallsBackToTablePath,
		"StandbyTakesOver":                         testStandbyTakesOver,
		"ReportsSlotLag":                           testReportsSlotLag,
		"BacklogAndLostSlotGoThroughTablePath":     testBacklogAndLostSlot,
		"SafetyNetDeliversARowTheStreamMissed":     testSafetyNet,
		"TablePathClaimReadsABoundedWindow":        testClaimWindow,
		"EventTypesLeaveOtherTypesToTheirRelays":   testEventTypes,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, c.URL())
		})
	}
}

type bundle struct {
	pool   *pgxpool.Pool
	schema string
	table  string
	url    string
}

// setup makes a schema with a migrated outbox table on the logical
// cluster.
func setup(t testing.TB, url string) bundle {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := testutil.SchemaName(t)
	if _, err := pgdriver.Migrate(ctx, pool, schema); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, _, _ = outboxcdc.Drop(ctx, pool, schema, "")
		_, _ = pool.Exec(ctx, `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	return bundle{pool: pool, schema: schema, table: testutil.Table(schema), url: url}
}

// start runs a capture relay and its table path until the test ends.
func (b bundle) start(t *testing.T, sink outbox.Sink, tweak func(*outboxcdc.Config, *outbox.RelayConfig)) (*outboxcdc.Relay, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := outboxcdc.Config{Sink: sink, Schema: b.schema, BatchSize: 100, StatusInterval: 50 * time.Millisecond,
		RetryInterval: 100 * time.Millisecond, LagInterval: 100 * time.Millisecond, Logger: quiet()}
	rcfg := outbox.RelayConfig{Sink: sink, Schema: b.schema, PollInterval: 50 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, Logger: quiet(),
		HeartbeatInterval: -1, SummaryInterval: -1}
	if tweak != nil {
		tweak(&cfg, &rcfg)
	}
	cfg.MaxAttempts, cfg.BackoffBase, cfg.BackoffMax = rcfg.MaxAttempts, rcfg.BackoffBase, rcfg.BackoffMax
	r, err := outboxcdc.New(b.pool, &b.pool.Config().ConnConfig.Config, cfg)
	if err != nil {
		t.Fatal(err)
	}
	slot, err := r.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rcfg.CaptureSlot = slot.Name
	table, err := outbox.NewRelay(outbox.Postgres(b.pool), rcfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := r.Run(ctx); err != nil {
			t.Errorf("capture relay: %v", err)
		}
	})
	if err := table.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop := func() {
		cancel()
		wg.Wait()
		if err := table.Stop(context.Background()); err != nil {
			t.Errorf("table relay: %v", err)
		}
	}
	t.Cleanup(stop)
	return r, stop
}

func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// insert writes one event per type with plain SQL in one transaction.
func (b bundle) insert(t *testing.T, types ...string) {
	t.Helper()
	for _, typ := range types {
		if _, err := b.pool.Exec(context.Background(), `INSERT INTO `+b.table+` (event_type, payload) VALUES ($1, '{"a":1}')`, typ); err != nil {
			t.Fatal(err)
		}
	}
}

func (b bundle) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+b.table+` WHERE `+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func types(events []outbox.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.EventType
	}
	return out
}

func testDeliversInCommitOrder(t *testing.T, url string) {
	b := setup(t, url)
	rec := outboxtest.NewRecorder()
	b.start(t, rec, nil)
	ctx := context.Background()

	// first takes the smaller ID but commits after second.
	first, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Exec(ctx, `INSERT INTO `+b.table+` (event_type, payload) VALUES ('first', '{}')`); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "second")
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// A rollback is never delivered.
	rb, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rb.Exec(ctx, `INSERT INTO `+b.table+` (event_type, payload) VALUES ('rolled-back', '{}')`); err != nil {
		t.Fatal(err)
	}
	if err := rb.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "third")
	rec.WaitLen(t, 3, 10*time.Second)
	got := strings.Join(types(rec.Events()), ",")
	if got != "second,first,third" {
		t.Fatalf("delivered %s, want second,first,third (commit order, no rollback)", got)
	}
	if ev := rec.Events()[1]; ev.ID >= rec.Events()[0].ID {
		t.Fatalf("first's ID %d should be below second's %d", ev.ID, rec.Events()[0].ID)
	}
	testutil.WaitFor(t, 10*time.Second, "rows marked processed", func() bool {
		return b.count(t, `status = 'processed'`) == 3
	})
	if rec.Len() != 3 {
		t.Fatalf("delivered %d events, want 3 (the table path must not send them again)", rec.Len())
	}
}

func testFallsBackToTablePath(t *testing.T, url string) {
	b := setup(t, url)
	rec := outboxtest.NewRecorder()
	rec.SetFail(func(e outbox.Event) error {
		switch {
		case e.EventType == "poison":
			return errors.New("refused")
		case e.Attempts < 2 && e.ID%3 == 0:
			return errors.New("flaky") // fails from the stream and once more
		}
		return nil
	})
	b.start(t, rec, func(c *outboxcdc.Config, r *outbox.RelayConfig) {
		r.MaxAttempts = 3
		// Mark at once: a mark right after the stream handed a commit out
		// must wait until the commit is visible.
		c.SettleInterval = time.Microsecond
	})
	var want []string
	for i := range 60 {
		typ := fmt.Sprintf("ok.%d", i)
		if i%20 == 0 {
			typ = "poison"
		} else {
			want = append(want, typ)
		}
		b.insert(t, typ)
	}
	t.Cleanup(func() {
		if t.Failed() {
			rows, _ := b.pool.Query(context.Background(), `SELECT id, event_type, status, attempts, coalesce(last_error, ''), available_at > now() FROM `+b.table+` WHERE status <> 'processed' ORDER BY id`)
			for rows.Next() {
				var id int64
				var typ, status, lastErr string
				var attempts int
				var later bool
				_ = rows.Scan(&id, &typ, &status, &attempts, &lastErr, &later)
				t.Logf("event %d %s: %s, %d attempts, %q, later %v", id, typ, status, attempts, lastErr, later)
			}
			rows.Close()
			var ids []int64
			for _, e := range rec.Events() {
				ids = append(ids, e.ID)
			}
			t.Logf("delivered: %v", ids)
		}
	})
	testutil.WaitFor(t, 20*time.Second, "every event settled", func() bool {
		return b.count(t, `status = 'processed'`) == len(want) && b.count(t, `status = 'failed'`) == 3
	})
	seen := map[string]bool{}
	for _, e := range rec.Events() {
		seen[e.EventType] = true
	}
	for _, typ := range want {
		if !seen[typ] {
			t.Fatalf("%s never delivered", typ)
		}
	}
	if n := b.count(t, `status = 'failed' AND event_type = 'poison' AND attempts = 3 AND last_error = 'refused'`); n != 3 {
		t.Fatalf("%d poison events dead-lettered after 3 attempts, want 3", n)
	}
	if n := b.count(t, `status = 'processed' AND attempts > 0`); n == 0 {
		t.Fatal("no event went through the table path's retry")
	}
}

func testStandbyTakesOver(t *testing.T, url string) {
	b := setup(t, url)
	rec := outboxtest.NewRecorder()
	active, stopActive := b.start(t, rec, nil)
	testutil.WaitFor(t, 10*time.Second, "first relay streams", active.Streaming)
	standby, _ := b.start(t, rec, nil)
	b.insert(t, "one")
	rec.WaitLen(t, 1, 10*time.Second)
	if standby.Streaming() {
		t.Fatal("two relays stream from one slot")
	}
	var holder string
	if err := b.pool.QueryRow(context.Background(), `SELECT holder FROM `+pgx.Identifier{b.schema, "outbox_leases"}.Sanitize()+` WHERE name LIKE 'capture:%'`).Scan(&holder); err != nil {
		t.Fatalf("lease row: %v", err)
	}
	stopActive()
	testutil.WaitFor(t, 10*time.Second, "standby takes over", standby.Streaming)
	b.insert(t, "two")
	rec.WaitLen(t, 2, 10*time.Second)
	if got := strings.Join(types(rec.Events()), ","); got != "one,two" {
		t.Fatalf("delivered %s, want one,two", got)
	}
}

func testReportsSlotLag(t *testing.T, url string) {
	b := setup(t, url)
	// A slot left behind: created, never streamed from.
	slot, err := outboxcdc.Setup(context.Background(), b.pool, &b.pool.Config().ConnConfig.Config, b.schema, "left")
	if err != nil {
		t.Fatal(err)
	}
	// A failover slot exactly when the server has them (PostgreSQL 17).
	var version int
	if err := b.pool.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if !slot.Created || slot.Failover != (version >= 170000) {
		t.Fatalf("slot %+v on server_version_num %d", slot, version)
	}
	b.insert(t, "a", "b", "c")
	lag, found, err := pgdriver.New(b.pool, b.schema).ReplicationSlotLag(context.Background(), slot.Name)
	if err != nil || !found {
		t.Fatalf("lag: %v, found %v", err, found)
	}
	if lag.Active || lag.RetainedBytes <= 0 {
		t.Fatalf("slot left behind: %+v, want inactive with retained WAL", lag)
	}
	var reported atomic.Int64
	rec := outboxtest.NewRecorder()
	b.start(t, rec, func(c *outboxcdc.Config, _ *outbox.RelayConfig) {
		c.OnSlotLag = func(n int64) { reported.Store(n) }
		c.MaxSlotLag = 1
	})
	testutil.WaitFor(t, 10*time.Second, "lag reported", func() bool { return reported.Load() > 0 })
}

func TestCaptureNeedsLogicalWALLevel(t *testing.T) {
	t.Parallel()
	pool := testutil.Pool(t) // the shared server, wal_level replica
	var level string
	if err := pool.QueryRow(context.Background(), `SHOW wal_level`).Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level == "logical" {
		t.Fatal("the shared server has wal_level = logical; this test needs one without")
	}
	err := outboxcdc.CheckWALLevel(context.Background(), pool)
	if !errors.Is(err, outboxcdc.ErrWALLevel) || !strings.Contains(err.Error(), "ALTER SYSTEM SET wal_level = logical") {
		t.Fatalf("err = %v, want ErrWALLevel saying what to change", err)
	}
}

func testBacklogAndLostSlot(t *testing.T, url string) {
	b := setup(t, url)
	// Written before any slot exists: the table path delivers them.
	b.insert(t, "backlog.1", "backlog.2")
	rec := outboxtest.NewRecorder()
	_, stop := b.start(t, rec, nil)
	b.insert(t, "streamed")
	rec.WaitLen(t, 3, 10*time.Second)
	testutil.WaitFor(t, 10*time.Second, "rows marked", func() bool { return b.count(t, `status = 'processed'`) == 3 })
	stop()
	// The slot disappears while no relay runs (a failover to a server
	// without it); events written meanwhile are in no stream.
	slot := outboxcdc.SlotName(b.schema, "")
	testutil.WaitFor(t, 10*time.Second, "the walsender gone", func() bool {
		var active bool
		if err := b.pool.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active); err != nil {
			t.Fatal(err)
		}
		return !active
	})
	if _, err := b.pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "gap.1", "gap.2")
	b.start(t, rec, nil)
	b.insert(t, "after")
	testutil.WaitFor(t, 15*time.Second, "every event delivered and marked", func() bool {
		return b.count(t, `status = 'processed'`) == 6
	})
	got := map[string]int{}
	for _, e := range rec.Events() {
		got[e.EventType]++
	}
	for _, typ := range []string{"backlog.1", "backlog.2", "streamed", "gap.1", "gap.2", "after"} {
		if got[typ] != 1 {
			t.Fatalf("%s delivered %d times, want once (all: %v)", typ, got[typ], got)
		}
	}
}

// testSafetyNet loses the mark of a streamed event (its row back to
// pending, unchanged, after the slot confirmed past it): the stream never
// delivers it again, and the table path's safety net (captureMissed) must
// claim and deliver it once the slot's catalog_xmin passes its
// transaction. Checkpoints write the running-transactions records that
// move catalog_xmin; fillers keep the stream confirming.
func testSafetyNet(t *testing.T, url string) {
	b := setup(t, url)
	rec := outboxtest.NewRecorder()
	b.start(t, rec, nil)
	ctx := context.Background()
	b.insert(t, "lost")
	testutil.WaitFor(t, 20*time.Second, "the event streamed and marked", func() bool {
		return b.count(t, `status = 'processed'`) == 1
	})
	if _, err := b.pool.Exec(ctx, `UPDATE `+b.table+` SET status = 'pending', processed_at = NULL, locked_by = NULL,
    updated_at = created_at WHERE event_type = 'lost'`); err != nil {
		t.Fatal(err)
	}
	delivered := func() int {
		n := 0
		for _, e := range rec.Events() {
			if e.EventType == "lost" {
				n++
			}
		}
		return n
	}
	testutil.WaitFor(t, 60*time.Second, "the lost mark's event delivered again by the table path", func() bool {
		if _, err := b.pool.Exec(ctx, `CHECKPOINT`); err != nil {
			t.Fatal(err)
		}
		b.insert(t, "filler")
		return delivered() == 2 && b.count(t, `event_type = 'lost' AND status = 'processed'`) == 1
	})
	// The net takes only what the stream will not deliver: no filler
	// (streamed while the net was watching) went out twice.
	testutil.WaitFor(t, 20*time.Second, "fillers settled", func() bool {
		return b.count(t, `event_type = 'filler' AND status <> 'processed'`) == 0
	})
	seen := map[int64]bool{}
	for _, e := range rec.Events() {
		if e.EventType == "filler" && seen[e.ID] {
			t.Fatalf("filler %d delivered twice: the safety net took a row the stream delivers", e.ID)
		}
		seen[e.ID] = true
	}
}
