package handlersink_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/sink/handlersink"
)

// runs counts each handler's calls per event.
type runs struct {
	mu sync.Mutex
	n  map[string]map[int64]int
}

func (r *runs) add(handler string, id int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]map[int64]int{}
	}
	if r.n[handler] == nil {
		r.n[handler] = map[int64]int{}
	}
	r.n[handler][id]++
	return r.n[handler][id]
}

func (r *runs) of(handler string) map[int64]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int64]int{}
	for id, n := range r.n[handler] {
		out[id] = n
	}
	return out
}

func TestFanOutRunsEveryHandlerAndFailsTheEvent(t *testing.T) {
	t.Parallel()
	var r runs
	sink := handlersink.New(handlersink.Config{})
	sink.HandleNamed("order.paid", "notify", func(_ context.Context, e outbox.Event) error {
		r.add("notify", e.ID)
		if e.ID == 2 {
			return errors.New("mail server down")
		}
		return nil
	})
	sink.HandleNamed("order.paid", "audit", func(_ context.Context, e outbox.Event) error {
		r.add("audit", e.ID)
		if e.ID == 3 {
			return outbox.Permanent(errors.New("bad payload"))
		}
		return nil
	})
	sink.HandleNamed("order.paid", "panicky", func(_ context.Context, e outbox.Event) error {
		if e.ID == 3 {
			panic("boom")
		}
		return nil
	})
	errs := sink.Publish(context.Background(), []outbox.Event{event(1, "order.paid"), event(2, "order.paid"), event(3, "order.paid")})
	require.Len(t, errs, 3)
	require.NoError(t, errs[0])
	require.ErrorContains(t, errs[1], `handler "notify" for "order.paid" failed on event 2: mail server down`)
	require.False(t, outbox.IsPermanent(errs[1]))
	// A permanent failure beside a panic (retryable) is retried.
	require.ErrorContains(t, errs[2], `handler "audit"`)
	require.ErrorContains(t, errs[2], `handler "panicky" for "order.paid" panicked on event 3: boom`)
	require.False(t, outbox.IsPermanent(errs[2]))
	var he *handlersink.HandlerErrors
	require.ErrorAs(t, errs[2], &he)
	require.Len(t, he.Errs, 2)
	require.True(t, outbox.IsPermanent(he.Errs[0]))
	// Every handler ran on every event, after a failure too.
	require.Equal(t, map[int64]int{1: 1, 2: 1, 3: 1}, r.of("notify"))
	require.Equal(t, map[int64]int{1: 1, 2: 1, 3: 1}, r.of("audit"))

	// Re-registering a name replaces it in its place; Handle replaces all.
	sink.HandleNamed("order.paid", "notify", func(context.Context, outbox.Event) error { return nil })
	sink.HandleNamed("order.paid", "panicky", func(context.Context, outbox.Event) error { return nil })
	require.Nil(t, sink.Publish(context.Background(), []outbox.Event{event(2, "order.paid")}))
	sink.Handle("order.paid", func(context.Context, outbox.Event) error { return errors.New("only me") })
	require.ErrorContains(t, sink.Publish(context.Background(), []outbox.Event{event(1, "order.paid")})[0], "only me")

	require.Panics(t, func() { sink.HandleNamed("order.paid", "", func(context.Context, outbox.Event) error { return nil }) })
	require.Panics(t, func() { sink.HandleNamed("", "x", func(context.Context, outbox.Event) error { return nil }) })
	require.Panics(t, func() { sink.HandleNamed("order.paid", "x", nil) })
}

// ledgerSetup is an outbox schema with a ledger table beside it.
func ledgerSetup(t *testing.T) (outbox.Database, string, *handlersink.PostgresLedger) {
	t.Helper()
	pool, schema := testutil.Schema(t)
	ledger, err := handlersink.NewPostgresLedger(pool, handlersink.PostgresLedgerConfig{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, ledger.Migrate(context.Background()))
	require.NoError(t, ledger.Migrate(context.Background()), "Migrate is idempotent")
	return outbox.Postgres(pool), schema, ledger
}

// Two listeners of one event type, a relay on PostgreSQL: the notification
// fails once and is retried; with the ledger, the audit runs exactly once
// per event across the retry. Without it, the retry runs the audit again:
// the seam the ledger fills.
func TestLedgerSkipsHandlersThatSucceeded(t *testing.T) {
	t.Parallel()
	for _, withLedger := range []bool{true, false} {
		name := map[bool]string{true: "ledger", false: "no_ledger"}[withLedger]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, schema, ledger := ledgerSetup(t)
			var r runs
			cfg := handlersink.Config{}
			if withLedger {
				cfg.Ledger = ledger
			}
			sink := handlersink.New(cfg)
			sink.HandleNamed("order.paid", "notify", func(_ context.Context, e outbox.Event) error {
				if r.add("notify", e.ID) == 1 && e.AggregateID == "flaky" {
					return errors.New("mail server down")
				}
				return nil
			})
			sink.HandleNamed("order.paid", "audit", func(_ context.Context, e outbox.Event) error {
				r.add("audit", e.ID)
				return nil
			})

			ctx := context.Background()
			pool := testutil.Pool(t)
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			res, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema}).Write(ctx, tx,
				outbox.Message{EventType: "order.paid", AggregateType: "order", AggregateID: "ok-1", Payload: map[string]int{}},
				outbox.Message{EventType: "order.paid", AggregateType: "order", AggregateID: "flaky", Payload: map[string]int{}},
				outbox.Message{EventType: "order.paid", AggregateType: "order", AggregateID: "ok-2", Payload: map[string]int{}})
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
			flaky := res.IDs[1]

			relay, err := outbox.NewRelay(db, outbox.RelayConfig{Schema: schema, Sink: sink, PollInterval: 10 * time.Millisecond,
				BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, HeartbeatInterval: -1,
				Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			require.NoError(t, relay.Start(ctx))
			mgr := outbox.NewManager(db, outbox.ManagerConfig{Schema: schema})
			testutil.WaitFor(t, 20*time.Second, "every event to be processed", func() bool {
				s, err := mgr.Stats(ctx)
				require.NoError(t, err)
				return s.Processed == 3
			})
			stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			require.NoError(t, relay.Stop(stopCtx))

			e, err := mgr.Event(ctx, flaky)
			require.NoError(t, err)
			require.Equal(t, 1, e.Attempts, "the flaky event failed once, then was delivered")
			require.Contains(t, e.LastError, "mail server down")
			require.Equal(t, map[int64]int{res.IDs[0]: 1, flaky: 2, res.IDs[2]: 1}, r.of("notify"))
			wantAudit := map[int64]int{res.IDs[0]: 1, flaky: 1, res.IDs[2]: 1}
			if !withLedger {
				wantAudit[flaky] = 2
			}
			require.Equal(t, wantAudit, r.of("audit"))

			if withLedger {
				// The ledger's rows: both handlers of each event.
				rows, err := pool.Query(ctx, `SELECT event_key || ' ' || handler FROM `+
					pgx.Identifier{schema, handlersink.LedgerTableDefault}.Sanitize()+` ORDER BY event_key, handler`)
				require.NoError(t, err)
				got, err := pgx.CollectRows(rows, pgx.RowTo[string])
				require.NoError(t, err)
				require.Len(t, got, 6, strings.Join(got, "\n"))

				n, err := ledger.Purge(ctx, time.Hour)
				require.NoError(t, err)
				require.Zero(t, n, "records younger than the cutoff stay")
				_, err = pool.Exec(ctx, `UPDATE `+pgx.Identifier{schema, handlersink.LedgerTableDefault}.Sanitize()+` SET succeeded_at = now() - interval '2 hours'`)
				require.NoError(t, err)
				n, err = ledger.Purge(ctx, time.Hour)
				require.NoError(t, err)
				require.EqualValues(t, 6, n)
			}
		})
	}
}

// A ledger that cannot be read fails the batch retryably: no handler runs
// blind.
func TestLedgerReadFailureFailsTheBatch(t *testing.T) {
	t.Parallel()
	var ran bool
	sink := handlersink.New(handlersink.Config{Ledger: brokenLedger{}})
	sink.HandleNamed("x", "a", func(context.Context, outbox.Event) error { ran = true; return nil })
	errs := sink.Publish(context.Background(), []outbox.Event{event(1, "x"), event(2, "x")})
	require.Len(t, errs, 2)
	require.ErrorContains(t, errs[0], "read the handler ledger: ledger down")
	require.False(t, outbox.IsPermanent(errs[0]))
	require.False(t, ran)
}

type brokenLedger struct{}

func (brokenLedger) Succeeded(context.Context, []string) (map[string][]string, error) {
	return nil, errors.New("ledger down")
}

func (brokenLedger) RecordSuccess(context.Context, string, string) error {
	return errors.New("ledger down")
}

// Tenants' event IDs repeat: the ledger keys on the qualified ID, so two
// tenants' event 1 each run every handler once, and a retry of one runs
// only its own missing handler. Keyed on the bare ID, the second tenant's
// audit would be skipped for the first's success.
func TestLedgerKeysOnTheTenantQualifiedID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.Pool(t)
	name := testutil.SchemaName(t)
	prefix := "hl_" + name[len(name)-8:] + "_"
	acme, globex := prefix+"acme", prefix+"globex"
	for _, s := range []string{acme, globex} {
		t.Cleanup(func() { testutil.DropSchema(t, pool, s) })
		_, err := pgdriver.Migrate(ctx, pool, s)
		require.NoError(t, err)
		// Event 1 of each tenant: the same bare ID.
		_, err = pool.Exec(ctx, `INSERT INTO `+testutil.Table(s)+` (event_type, aggregate_type, aggregate_id, payload) VALUES ('order.paid', 'order', '7', '{}')`)
		require.NoError(t, err)
	}
	ledgerSchema := testutil.EmptySchemaName(t)
	_, err := pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{ledgerSchema}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() { testutil.DropSchema(t, pool, ledgerSchema) })
	ledger, err := handlersink.NewPostgresLedger(pool, handlersink.PostgresLedgerConfig{Schema: ledgerSchema})
	require.NoError(t, err)
	require.NoError(t, ledger.Migrate(ctx))

	var (
		mu    sync.Mutex
		calls = map[string]int{} // handler tenant:id → calls
	)
	add := func(handler string, e outbox.Event) int {
		mu.Lock()
		defer mu.Unlock()
		calls[handler+" "+e.UniqueID()]++
		return calls[handler+" "+e.UniqueID()]
	}
	sink := handlersink.New(handlersink.Config{Ledger: ledger})
	sink.HandleNamed("order.paid", "notify", func(_ context.Context, e outbox.Event) error {
		if add("notify", e) == 1 && e.Tenant == acme {
			return errors.New("mail server down")
		}
		return nil
	})
	sink.HandleNamed("order.paid", "audit", func(_ context.Context, e outbox.Event) error {
		add("audit", e)
		return nil
	})
	ts, err := outbox.NewTenants(outbox.Postgres(pool), outbox.TenantsConfig{
		Relay: outbox.RelayConfig{Sink: sink, BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler)},
		Schemas: prefix + "*", ScanInterval: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, ts.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, ts.Stop(stopCtx))
	})
	testutil.WaitFor(t, 20*time.Second, "both tenants' events processed", func() bool {
		n := 0
		for _, s := range []string{acme, globex} {
			var c int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+testutil.Table(s)+` WHERE status = 'processed'`).Scan(&c))
			n += c
		}
		return n == 2
	})
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{
		"notify " + acme + ":1": 2, "audit " + acme + ":1": 1,
		"notify " + globex + ":1": 1, "audit " + globex + ":1": 1,
	}, calls)
	rows, err := pool.Query(ctx, `SELECT event_key || ' ' || handler FROM `+pgx.Identifier{ledgerSchema, handlersink.LedgerTableDefault}.Sanitize()+` ORDER BY 1`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{acme + ":1 audit", acme + ":1 notify", globex + ":1 audit", globex + ":1 notify"}, got)
}
