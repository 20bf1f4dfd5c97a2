package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/internal/testutil/pgbouncer"
)

// Postgres is the harness for the PostgreSQL driver: a schema per test in
// the database at TEST_DATABASE_URL.
func Postgres() Harness {
	return Harness{Name: "postgres", SkipLocked: true, Open: openPostgres}
}

// PostgresPgBouncer is the harness for the PostgreSQL driver in PgBouncer
// mode: the driver and the writer reach the database at TEST_DATABASE_URL
// through a PgBouncer of the test's own in transaction mode, on a pool made
// with outbox.ConfigurePgBouncer; the suite's own setup (migrations, row
// locks, clock changes) goes to the server directly.
func PostgresPgBouncer() Harness {
	return Harness{Name: "postgres-pgbouncer", SkipLocked: true, Pooled: true, Open: openPostgresPgBouncer}
}

func openPostgresPgBouncer(t testing.TB, empty bool) *DB {
	t.Helper()
	db := openPostgres(t, empty)
	bouncer := pgbouncer.Start(t, testutil.DatabaseURL(), pgbouncer.Options{})
	open := func(t testing.TB) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(bouncer.URL(t, testutil.DatabaseURL()))
		if err != nil {
			t.Fatal(err)
		}
		outbox.ConfigureRelayPool(cfg, "drivertest")
		outbox.ConfigurePgBouncer(cfg)
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	pool := open(t)
	db.Database = outbox.Postgres(pool)
	db.Begin = func(ctx context.Context) (AppTx, error) {
		tx, err := pool.Begin(ctx)
		return pgTx{tx: tx}, err
	}
	db.Reopen = func(t testing.TB) outbox.Database { return outbox.Postgres(open(t)) }
	return db
}

type pgTx struct{ tx pgx.Tx }

func (p pgTx) Write(ctx context.Context, w *outbox.Writer, msgs ...outbox.Message) (outbox.WriteResult, error) {
	return w.Write(ctx, p.tx, msgs...)
}

func (p pgTx) Check(ctx context.Context) error {
	_, err := p.tx.Exec(ctx, `SELECT 1`)
	return err
}

func (p pgTx) Commit(ctx context.Context) error   { return p.tx.Commit(ctx) }
func (p pgTx) Rollback(ctx context.Context) error { return p.tx.Rollback(ctx) }

func openPostgres(t testing.TB, empty bool) *DB {
	t.Helper()
	var (
		pool   *pgxpool.Pool
		schema string
	)
	if empty {
		pool, schema = testutil.Pool(t), testutil.EmptySchemaName(t)
	} else {
		pool, schema = testutil.Schema(t)
	}
	ctx := context.Background()
	db := &DB{
		Database: outbox.Postgres(pool), Schema: schema, Dialect: outbox.DialectPostgres,
		Table:   pgx.Identifier{schema, "outbox_events"}.Sanitize(),
		Archive: pgx.Identifier{schema, "outbox_events_archive"}.Sanitize(),
		Begin: func(ctx context.Context) (AppTx, error) {
			tx, err := pool.Begin(ctx)
			return pgTx{tx: tx}, err
		},
	}
	db.SetTime = func(t testing.TB, table, column string, d time.Duration, ids ...int64) {
		t.Helper()
		q := `UPDATE ` + table + ` SET ` + pgx.Identifier{column}.Sanitize() + ` = now() + $1::bigint * interval '1 microsecond'`
		args := []any{d.Microseconds()}
		if len(ids) > 0 {
			q += ` WHERE id = ANY($2)`
			args = append(args, ids)
		}
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("set %s: %v", column, err)
		}
	}
	db.LockRows = func(t testing.TB, ids []int64) func() {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT id FROM `+db.Table+` WHERE id = ANY($1) FOR UPDATE`, ids); err != nil {
			t.Fatal(err)
		}
		return func() { _ = tx.Rollback(ctx) }
	}
	db.Exec = func(t testing.TB, script string) {
		t.Helper()
		if _, err := pool.Exec(ctx, script); err != nil {
			t.Fatalf("exec: %v", err)
		}
	}
	db.Reopen = func(t testing.TB) outbox.Database { return outbox.Postgres(testutil.NewPool(t, "outbox-drivertest")) }
	db.ReopenReadOnly = func(t testing.TB) outbox.Database {
		cfg, err := pgxpool.ParseConfig(testutil.DatabaseURL())
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
		ro, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ro.Close)
		return outbox.Postgres(ro)
	}
	db.Now = func(t testing.TB) time.Time {
		t.Helper()
		var now time.Time
		if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}
	db.Count = func(t testing.TB, table string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatalf("count %s: %v", table, err)
		}
		return n
	}
	return db
}
