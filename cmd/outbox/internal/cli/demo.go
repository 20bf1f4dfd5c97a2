package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cmd/outbox/internal/dburl"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/sink/stdoutsink"
)

const (
	// demoSchemaDefault is the demo's own schema.
	demoSchemaDefault = "outbox_demo"
	// demoSchemaComment marks a schema the demo created, so it never
	// empties a schema that holds someone's real outbox.
	demoSchemaComment = "created by outbox demo"
	// demoTimeout bounds the wait for the relay.
	demoTimeout = 30 * time.Second
)

// demoOrder is one checkout the demo runs.
type demoOrder struct {
	id         string
	customer   string
	totalCents int64
	fail       error // the checkout fails after writing: its transaction rolls back
}

func (a *app) demoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Watch the outbox at work on a local database",
		Long: `demo walks through the transactional outbox on a schema of its own
(outbox_demo, or --schema): it migrates it, creates an orders table, writes
orders and their order.created events in the same transactions (one of them
rolled back, one retried with the same idempotency key), runs a relay to the
stdout sink until every committed event is processed, and prints the stats.

It narrates on stderr; the published events are JSON lines on stdout. It runs
on the PostgreSQL database that --database-url or $` + EnvDatabaseURL + ` names;
it empties its schema at the start, so it can run again and again, and it
refuses a schema it did not create. With no database URL it needs no server:
it creates an SQLite file in a new temporary directory and runs there.`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			schema := demoSchemaDefault
			if cmd.Flags().Changed("schema") {
				schema = a.schema
			}
			level := "warn" // the narration tells the story; relay logs only on trouble
			if cmd.Flags().Changed("log-level") {
				level = a.logLevel
			}
			relayLog, err := newLogger(a.stderr, a.logFormat, level, a.redact)
			if err != nil {
				return err
			}
			return a.demo(cmd.Context(), schema, relayLog)
		}),
	}
}

func (a *app) demo(ctx context.Context, schema string, relayLog *slog.Logger) error {
	say := func(format string, args ...any) { notef(a.stderr, format+"\n", args...) }
	var (
		st  *demoStore
		err error
	)
	switch raw := a.databaseURLOrEnv(); {
	case raw == "":
		st, err = a.demoSQLite(ctx, say)
	case isSQLURL(raw):
		return usagef("outbox demo runs on PostgreSQL (--database-url postgres://…) or, with no database URL, on an embedded SQLite file; it empties the outbox table it uses, so it does not take a SQLite or MySQL database of yours")
	default:
		st, err = a.demoPostgres(ctx, schema, say)
	}
	if err != nil {
		return err
	}
	defer st.close()
	return a.runDemo(ctx, st, relayLog, say)
}

// demoStore is the database the demo runs on: its outbox, and a checkout
// that writes an order and its event in one transaction.
type demoStore struct {
	db       outbox.Database
	schema   string
	checkout func(o demoOrder) (outbox.WriteResult, error)
	// next is the hint that ends the demo: the flags that name its outbox.
	next  string
	close func()
}

// demoEvent is the message a checkout writes.
func demoEvent(o demoOrder) outbox.Message {
	return outbox.Message{
		EventType: "order.created", AggregateType: "order", AggregateID: o.id,
		Payload:        map[string]any{"order_id": o.id, "customer": o.customer, "total_cents": o.totalCents},
		IdempotencyKey: outbox.IdempotencyKey("order", o.id, "order.created", time.Now()),
		CorrelationID:  "demo-checkout-" + o.id,
	}
}

// demoPostgres prepares the demo's schema on PostgreSQL.
func (a *app) demoPostgres(ctx context.Context, schema string, say func(string, ...any)) (*demoStore, error) {
	pc, err := a.poolConfig()
	if err != nil {
		return nil, err
	}
	pool, err := a.open(ctx, pc)
	if err != nil {
		return nil, err
	}
	say("outbox demo on %s, schema %q", describeDatabase(pc), schema)
	if err := claimDemoSchema(ctx, pool, schema); err != nil {
		pool.Close()
		return nil, err
	}
	db := outbox.Postgres(pool)
	res, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, err
	}
	say("1. migrated the outbox table: %s", migratedVersion(res))
	orders := pgx.Identifier{schema, "orders"}.Sanitize()
	if err := resetDemoTables(ctx, pool, schema, orders); err != nil {
		pool.Close()
		return nil, err
	}
	say("2. created the business table %s (emptied, with the outbox, from any earlier run)", orders)
	writer := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	return &demoStore{
		db: db, schema: schema, close: pool.Close,
		next: a.demoDatabaseArgs() + "--schema " + schema,
		checkout: func(o demoOrder) (outbox.WriteResult, error) {
			var res outbox.WriteResult
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO `+orders+` (id, customer, total_cents) VALUES ($1, $2, $3)
ON CONFLICT (id) DO NOTHING`, o.id, o.customer, o.totalCents); err != nil {
					return err
				}
				var err error
				if res, err = writer.Write(ctx, tx, demoEvent(o)); err != nil {
					return err
				}
				return o.fail
			})
			return res, err
		},
	}, nil
}

// demoSQLite creates an SQLite file in a new temporary directory: the demo
// needs no database server. The file is left for the commands the closing
// hint names.
func (a *app) demoSQLite(ctx context.Context, say func(string, ...any)) (*demoStore, error) {
	dir, err := os.MkdirTemp("", "outbox-demo-")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "demo.db")
	raw := "sqlite://" + path
	db, closer, _, err := dburl.Open(ctx, raw, dburl.Options{})
	if err != nil {
		return nil, err
	}
	sdb := closer.(*sql.DB)
	say("outbox demo on an embedded SQLite database, %s (no --database-url or $%s given)", path, EnvDatabaseURL)
	res, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{})
	if err != nil {
		_ = sdb.Close()
		return nil, err
	}
	say("1. migrated the outbox table: %s", migratedVersion(res))
	if _, err := sdb.ExecContext(ctx, `CREATE TABLE "orders" (
    "id"          TEXT PRIMARY KEY,
    "customer"    TEXT NOT NULL,
    "total_cents" INTEGER NOT NULL,
    "created_at"  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
)`); err != nil {
		_ = sdb.Close()
		return nil, err
	}
	say(`2. created the business table "orders"`)
	writer := outbox.NewWriter(outbox.WriterConfig{Dialect: outbox.DialectSQLite})
	return &demoStore{
		db: db, close: func() { _ = sdb.Close() },
		next: "--database-url " + raw,
		checkout: func(o demoOrder) (res outbox.WriteResult, err error) {
			tx, err := sdb.BeginTx(ctx, nil)
			if err != nil {
				return res, err
			}
			defer func() {
				if err != nil {
					_ = tx.Rollback()
				}
			}()
			if _, err = tx.ExecContext(ctx, `INSERT INTO "orders" ("id", "customer", "total_cents") VALUES (?, ?, ?)
ON CONFLICT ("id") DO NOTHING`, o.id, o.customer, o.totalCents); err != nil {
				return res, err
			}
			if res, err = writer.WriteSQL(ctx, tx, demoEvent(o)); err != nil {
				return res, err
			}
			if err = o.fail; err != nil {
				return res, err
			}
			return res, tx.Commit()
		},
	}, nil
}

// runDemo writes the checkouts, relays their events to stdout and checks
// the outcome.
func (a *app) runDemo(ctx context.Context, st *demoStore, relayLog *slog.Logger, say func(string, ...any)) error {
	say("3. checkouts: each writes its order row and its order.created event in one transaction")
	committed := 0
	declined := errors.New("payment declined")
	for _, o := range []demoOrder{
		{id: "1001", customer: "ada", totalCents: 4200},
		{id: "1002", customer: "grace", totalCents: 1999},
		{id: "1003", customer: "edsger", totalCents: 500, fail: declined},
		{id: "1004", customer: "barbara", totalCents: 12000},
	} {
		res, err := st.checkout(o)
		switch {
		case errors.Is(err, declined):
			say("   order %s (%s): %v after the writes: rolled back, so neither the order nor its event exists", o.id, o.customer, err)
		case err != nil:
			return fmt.Errorf("order %s: %w", o.id, err)
		default:
			committed++
			say("   order %s (%s, %d.%02d): committed with event %d", o.id, o.customer, o.totalCents/100, o.totalCents%100, res.IDs[0])
		}
	}
	// A client retries the first checkout: the same idempotency key makes
	// the writer skip the event without failing the transaction.
	res2, err := st.checkout(demoOrder{id: "1001", customer: "ada", totalCents: 4200})
	if err != nil {
		return fmt.Errorf("order 1001 again: %w", err)
	}
	if len(res2.Duplicates) == 1 {
		say("   order 1001 again (a client retry): same idempotency key, event skipped as a duplicate")
	}

	say("4. starting a relay to the stdout sink: the events follow on stdout as JSON lines")
	relay, err := outbox.NewRelay(st.db, outbox.RelayConfig{
		Sink: stdoutsink.New(a.stdout), Schema: st.schema, RelayID: "outbox-demo",
		PollInterval: 100 * time.Millisecond, Logger: relayLog,
	})
	if err != nil {
		return err
	}
	start := time.Now()
	if err := relay.Start(ctx); err != nil {
		return err
	}
	mgr := outbox.NewManager(st.db, outbox.ManagerConfig{Schema: st.schema})
	stats, waitErr := waitProcessed(ctx, mgr, int64(committed))
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), relay.Config().ShutdownTimeout)
	defer cancel()
	if err := relay.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop relay: %w", err)
	}
	if waitErr != nil {
		return waitErr
	}
	say("5. all %d committed events processed in %v", committed, time.Since(start).Round(time.Millisecond))

	ghost, err := mgr.ListEvents(ctx, outbox.ListParams{AggregateType: "order", AggregateID: "1003"})
	if err != nil {
		return err
	}
	if len(ghost) != 0 {
		return fmt.Errorf("order 1003 was rolled back but has %d events", len(ghost))
	}
	say("6. checked: the rolled-back order 1003 has no event")
	say("stats: pending %d, processing %d, processed %d, failed %d", stats.Pending, stats.Processing, stats.Processed, stats.Failed)
	cmd := invocation()
	say("next: %s events list %s, or %s stats %s", cmd, st.next, cmd, st.next)
	return nil
}

// migratedVersion says which schema version the demo's migration reached
// and which migrations that database has: SQLite and MySQL skip
// PostgreSQL-only ones, so their numbers have gaps.
func migratedVersion(res outboxmigrate.Result) string {
	if len(res.Applied) == 0 {
		return fmt.Sprintf("schema version %d", res.Version)
	}
	nums := make([]string, len(res.Applied))
	for i, m := range res.Applied {
		nums[i] = fmt.Sprintf("%03d", m.Version)
	}
	return fmt.Sprintf("schema version %d (applied %s; this database needs no others)", res.Version, strings.Join(nums, ", "))
}

// demoDatabaseArgs is the --database-url argument (with a trailing space)
// the demo's closing hint repeats: the URL given by flag, password
// masked, the --config file when the URL came from it, or nothing when it
// came from the environment, which the next command reads as well.
func (a *app) demoDatabaseArgs() string {
	if a.databaseURLFlag == "" {
		if _, _, fromFile := a.fileDatabaseURL(); fromFile && os.Getenv(EnvDatabaseURL) == "" {
			return "--config '" + a.configPath + "' "
		}
		return ""
	}
	return "--database-url '" + redactDatabaseURL(a.databaseURLFlag) + "' "
}

// invocation is how the user can run this command again: "go run
// ./cmd/outbox" for a binary go run built, "outbox" when that is on the
// PATH and is this binary, else the path it was started by.
func invocation() string {
	exe, err := os.Executable()
	if err != nil {
		return "outbox"
	}
	if strings.Contains(filepath.ToSlash(exe), "/go-build") {
		return "go run ./cmd/outbox"
	}
	if p, err := exec.LookPath("outbox"); err == nil && sameFile(p, exe) {
		return "outbox"
	}
	return os.Args[0]
}

// sameFile reports whether paths a and b name one file.
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// waitProcessed polls until want events are processed and none is left
// pending or in flight.
func waitProcessed(ctx context.Context, mgr *outbox.Manager, want int64) (outbox.Stats, error) {
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		s, err := mgr.Stats(ctx)
		if err == nil && s.Processed >= want && s.Pending == 0 && s.Processing == 0 {
			return s, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return s, fmt.Errorf("waiting for the relay (%d of %d events processed): %w", s.Processed, want, err)
		case <-tick.C:
		}
	}
}

// claimDemoSchema creates the demo's schema, or checks that an existing one
// was created by the demo: the demo empties its tables.
func claimDemoSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	var comment *string
	err := pool.QueryRow(ctx, `SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1`, schema).Scan(&comment)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		quoted := pgx.Identifier{schema}.Sanitize()
		_, err = pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+quoted+`;
COMMENT ON SCHEMA `+quoted+` IS '`+demoSchemaComment+`'`)
		return err
	case err != nil:
		return err
	case comment == nil || *comment != demoSchemaComment:
		return &usageError{err: fmt.Errorf("schema %q exists and was not created by outbox demo, which empties its tables: pass --schema with a new name", schema)}
	}
	return nil
}

// resetDemoTables creates the orders table and empties it and the outbox.
func resetDemoTables(ctx context.Context, pool *pgxpool.Pool, schema, orders string) error {
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+orders+` (
    id          text PRIMARY KEY,
    customer    text NOT NULL,
    total_cents bigint NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
TRUNCATE `+orders+`, `+pgx.Identifier{schema, "outbox_events"}.Sanitize()+` RESTART IDENTITY`)
	return err
}
