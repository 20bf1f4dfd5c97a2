package drivertest_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the pgx database/sql driver
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

// fakeTB records what a Require function reports instead of stopping.
type fakeTB struct{ failures []string }

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failures = append(f.failures, fmt.Sprintf(format, args...))
}

// passes checks that check reports nothing.
func passes(t *testing.T, check func(tb outboxtest.TB)) {
	t.Helper()
	f := &fakeTB{}
	check(f)
	require.Empty(t, f.failures)
}

// fails checks that check reports exactly one failure holding every part.
func fails(t *testing.T, check func(tb outboxtest.TB), parts ...string) {
	t.Helper()
	f := &fakeTB{}
	check(f)
	require.Len(t, f.failures, 1, "want one failure")
	for _, p := range parts {
		require.Contains(t, f.failures[0], p)
	}
}

// appTx is an open transaction of one backend, with the Require functions
// bound to it.
type appTx struct {
	write      func(msgs ...outbox.Message) outbox.WriteResult
	one        func(tb outboxtest.TB, eventType string, opts *outboxtest.WrittenOpts) outbox.Event
	many       func(tb outboxtest.TB, eventType string, n int, opts *outboxtest.WrittenOpts) []outbox.Event
	none       func(tb outboxtest.TB, eventType string, opts *outboxtest.WrittenOpts)
	rollback   func()
	manyToCall string
}

type backend struct {
	name string
	// open returns begin, which opens a transaction, and the opts that
	// point the Require functions at the table.
	open func(t *testing.T) (begin func() appTx, opts outboxtest.WrittenOpts)
}

var backends = []backend{
	{name: "postgres-pgx", open: func(t *testing.T) (func() appTx, outboxtest.WrittenOpts) {
		pool, schema := testutil.Schema(t)
		w := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
		return func() appTx {
			ctx := context.Background()
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(ctx) })
			return pgxAppTx(t, w, tx)
		}, outboxtest.WrittenOpts{Schema: schema}
	}},
	{name: "postgres-stdlib", open: func(t *testing.T) (func() appTx, outboxtest.WrittenOpts) {
		_, schema := testutil.Schema(t)
		db, err := sql.Open("pgx", testutil.DatabaseURL())
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		return sqlBegin(t, db, outbox.DialectPostgres, schema), outboxtest.WrittenOpts{Schema: schema}
	}},
	{name: "sqlite", open: func(t *testing.T) (func() appTx, outboxtest.WrittenOpts) {
		db := drivertest.OpenSQLiteFile(t, filepath.Join(t.TempDir(), "outbox.db"))
		_, err := outbox.SQLite(db).Driver("").Migrate(context.Background())
		require.NoError(t, err)
		return sqlBegin(t, db, outbox.DialectSQLite, ""), outboxtest.WrittenOpts{Dialect: outbox.DialectSQLite}
	}},
	{name: "mariadb", open: func(t *testing.T) (func() appTx, outboxtest.WrittenOpts) {
		_, db := drivertest.MySQLDatabase(t)
		_, err := outbox.MySQL(db).Driver("").Migrate(context.Background())
		require.NoError(t, err)
		return sqlBegin(t, db, outbox.DialectMariaDB, ""), outboxtest.WrittenOpts{Dialect: outbox.DialectMariaDB}
	}},
}

func pgxAppTx(t *testing.T, w *outbox.Writer, tx pgx.Tx) appTx {
	ctx := context.Background()
	return appTx{
		write: func(msgs ...outbox.Message) outbox.WriteResult {
			res, err := w.Write(ctx, tx, msgs...)
			require.NoError(t, err)
			return res
		},
		one: func(tb outboxtest.TB, et string, o *outboxtest.WrittenOpts) outbox.Event {
			return outboxtest.RequireWrittenTx(ctx, tb, tx, et, o)
		},
		many: func(tb outboxtest.TB, et string, n int, o *outboxtest.WrittenOpts) []outbox.Event {
			return outboxtest.RequireManyWrittenTx(ctx, tb, tx, et, n, o)
		},
		none: func(tb outboxtest.TB, et string, o *outboxtest.WrittenOpts) {
			outboxtest.RequireNotWrittenTx(ctx, tb, tx, et, o)
		},
		rollback:   func() { require.NoError(t, tx.Rollback(ctx)) },
		manyToCall: "RequireManyWrittenTx",
	}
}

func sqlBegin(t *testing.T, db *sql.DB, dialect outbox.Dialect, schema string) func() appTx {
	w := outbox.NewWriter(outbox.WriterConfig{Schema: schema, Dialect: dialect})
	return func() appTx {
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback() })
		return appTx{
			write: func(msgs ...outbox.Message) outbox.WriteResult {
				res, err := w.WriteSQL(ctx, tx, msgs...)
				require.NoError(t, err)
				return res
			},
			one: func(tb outboxtest.TB, et string, o *outboxtest.WrittenOpts) outbox.Event {
				return outboxtest.RequireWrittenSQLTx(ctx, tb, tx, et, o)
			},
			many: func(tb outboxtest.TB, et string, n int, o *outboxtest.WrittenOpts) []outbox.Event {
				return outboxtest.RequireManyWrittenSQLTx(ctx, tb, tx, et, n, o)
			},
			none: func(tb outboxtest.TB, et string, o *outboxtest.WrittenOpts) {
				outboxtest.RequireNotWrittenSQLTx(ctx, tb, tx, et, o)
			},
			rollback:   func() { require.NoError(t, tx.Rollback()) },
			manyToCall: "RequireManyWrittenSQLTx",
		}
	}
}

// with returns base with the matching conditions of o.
func with(base outboxtest.WrittenOpts, o outboxtest.WrittenOpts) *outboxtest.WrittenOpts {
	o.Schema, o.Dialect = base.Schema, base.Dialect
	return &o
}

func TestRequireWritten(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			begin, base := b.open(t)
			tx := begin()
			res := tx.write(
				outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: "42",
					Payload: map[string]any{"id": 42, "items": []string{"book"}}, CorrelationID: "c-1"},
				outbox.Message{EventType: "order.paid", AggregateType: "order", AggregateID: "42", Payload: map[string]int{"id": 42}},
			)

			// The write is not committed: only the transaction sees it.
			var e outbox.Event
			passes(t, func(tb outboxtest.TB) {
				e = tx.one(tb, "order.created", with(base, outboxtest.WrittenOpts{
					AggregateType: "order", AggregateID: "42",
					Payload: []byte(`{ "items": ["book"], "id": 42.0 }`), // JSON-equal, not byte-equal
					Headers: map[string]string{outbox.HeaderCorrelationID: "c-1"},
				}))
			})
			require.Equal(t, res.IDs[0], e.ID)
			require.Equal(t, "order.created", e.EventType)
			require.JSONEq(t, `{"id":42,"items":["book"]}`, string(e.Payload))
			require.Equal(t, "c-1", e.CorrelationID())
			require.Equal(t, outbox.StatusPending, e.Status)
			passes(t, func(tb outboxtest.TB) { tx.one(tb, "order.created", &base) })

			// Each condition that differs is a failure listing what was written.
			for _, c := range []struct {
				name string
				opts outboxtest.WrittenOpts
			}{
				{"payload", outboxtest.WrittenOpts{Payload: map[string]any{"id": 43, "items": []string{"book"}}}},
				{"aggregate", outboxtest.WrittenOpts{AggregateID: "43"}},
				{"header value", outboxtest.WrittenOpts{Headers: map[string]string{outbox.HeaderCorrelationID: "c-2"}}},
				{"header missing", outboxtest.WrittenOpts{Headers: map[string]string{"tenant": "a"}}},
			} {
				t.Run(c.name, func(t *testing.T) {
					fails(t, func(tb outboxtest.TB) { tx.one(tb, "order.created", with(base, c.opts)) },
						"want 1 order.created event with", "found 0",
						fmt.Sprintf(`#%d aggregate order/42 payload {"id":42,"items":["book"]} headers {correlation_id=c-1}`, res.IDs[0]),
						"event types in the table: order.created ×1, order.paid ×1")
				})
			}
			fails(t, func(tb outboxtest.TB) { tx.one(tb, "order.shipped", &base) },
				"want 1 order.shipped event visible in the transaction, found 0; order.shipped events there: none")

			passes(t, func(tb outboxtest.TB) { tx.none(tb, "order.shipped", &base) })
			passes(t, func(tb outboxtest.TB) {
				tx.none(tb, "order.created", with(base, outboxtest.WrittenOpts{AggregateID: "43"}))
			})
			fails(t, func(tb outboxtest.TB) { tx.none(tb, "order.paid", &base) },
				"1 order.paid event visible in the transaction, want none", `payload {"id":42}`)

			// A second order.created: one is now ambiguous, many counts them.
			res2 := tx.write(outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: "43", Payload: map[string]int{"id": 43}})
			fails(t, func(tb outboxtest.TB) { tx.one(tb, "order.created", &base) },
				"2 order.created events are visible in the transaction, want 1 (for several, use "+tx.manyToCall+")")
			var got []outbox.Event
			passes(t, func(tb outboxtest.TB) { got = tx.many(tb, "order.created", 2, &base) })
			require.Equal(t, []int64{res.IDs[0], res2.IDs[0]}, []int64{got[0].ID, got[1].ID})
			passes(t, func(tb outboxtest.TB) {
				got = tx.many(tb, "order.created", 1, with(base, outboxtest.WrittenOpts{Payload: map[string]int{"id": 43}}))
			})
			require.Equal(t, res2.IDs[0], got[0].ID)
			fails(t, func(tb outboxtest.TB) { tx.many(tb, "order.created", 3, &base) },
				"want 3 order.created events visible in the transaction, found 2")

			// Rolled back, the events are gone for the next transaction.
			tx.rollback()
			next := begin()
			passes(t, func(tb outboxtest.TB) { next.none(tb, "order.created", &base) })
		})
	}
}

func TestRequireWrittenSeesOnlyItsTransaction(t *testing.T) {
	t.Parallel()
	pool, schema := testutil.Schema(t)
	ctx := context.Background()
	w := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	_, err = w.Write(ctx, tx, outbox.Message{EventType: "order.created", Payload: 1})
	require.NoError(t, err)
	opts := &outboxtest.WrittenOpts{Schema: schema}
	passes(t, func(tb outboxtest.TB) { outboxtest.RequireWrittenTx(ctx, tb, tx, "order.created", opts) })
	// The pool reads outside the transaction, before its commit.
	passes(t, func(tb outboxtest.TB) { outboxtest.RequireNotWrittenTx(ctx, tb, pool, "order.created", opts) })
	require.NoError(t, tx.Commit(ctx))
	passes(t, func(tb outboxtest.TB) { outboxtest.RequireWrittenTx(ctx, tb, pool, "order.created", opts) })
}

func TestRequireWrittenReportsBadUse(t *testing.T) {
	t.Parallel()
	pool, schema := testutil.Schema(t)
	ctx := context.Background()
	db, err := sql.Open("pgx", testutil.DatabaseURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	fails(t, func(tb outboxtest.TB) {
		outboxtest.RequireWrittenTx(ctx, tb, pool, "x", &outboxtest.WrittenOpts{Schema: schema, Payload: []byte(`{`)})
	}, "outboxtest: WrittenOpts.Payload is not valid JSON")
	fails(t, func(tb outboxtest.TB) {
		outboxtest.RequireWrittenSQLTx(ctx, tb, db, "x", &outboxtest.WrittenOpts{Schema: schema, Dialect: "oracle"})
	}, `outboxtest: WrittenOpts.Dialect: `, `unknown dialect "oracle"`)
	fails(t, func(tb outboxtest.TB) {
		outboxtest.RequireNotWrittenTx(ctx, tb, pool, "x", &outboxtest.WrittenOpts{Schema: schema + "_missing"})
	}, "outboxtest: read the x events in the transaction (postgres): ", "does not exist")
	fails(t, func(tb outboxtest.TB) {
		outboxtest.RequireManyWrittenTx(ctx, tb, pool, "x", -1, &outboxtest.WrittenOpts{Schema: schema})
	}, "outboxtest: want -1 x events: n must be 0 or more")
	// A real testing.T stops at the failure; the fake returns zero values.
	f := &fakeTB{}
	require.Zero(t, outboxtest.RequireWrittenTx(ctx, f, pool, "x", &outboxtest.WrittenOpts{Schema: schema}))
	require.Nil(t, outboxtest.RequireManyWrittenTx(ctx, f, pool, "x", 2, &outboxtest.WrittenOpts{Schema: schema}))
	require.Len(t, f.failures, 2)
	require.True(t, strings.HasPrefix(f.failures[0], "outboxtest: "))
}

func TestRequireWrittenBoundsItsMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := drivertest.OpenSQLiteFile(t, filepath.Join(t.TempDir(), "outbox.db"))
	_, err := outbox.SQLite(db).Driver("").Migrate(ctx)
	require.NoError(t, err)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	w := outbox.NewWriter(outbox.WriterConfig{Dialect: outbox.DialectSQLite})
	long := strings.Repeat("x", 300)
	for i := range 12 {
		_, err := w.WriteSQL(ctx, tx, outbox.Message{EventType: "big", AggregateID: fmt.Sprint(i), Payload: map[string]string{"s": long}})
		require.NoError(t, err)
	}
	opts := &outboxtest.WrittenOpts{Dialect: outbox.DialectSQLite}
	f := &fakeTB{}
	outboxtest.RequireNotWrittenSQLTx(ctx, f, tx, "big", opts)
	require.Len(t, f.failures, 1)
	msg := f.failures[0]
	require.Contains(t, msg, "12 big events visible in the transaction, want none")
	require.Contains(t, msg, "#10 aggregate /9 payload {\"s\":\"xxx")
	require.NotContains(t, msg, "#11 ")
	require.True(t, strings.HasSuffix(msg, "… 2 more"), msg[len(msg)-40:])
	require.Contains(t, msg, `x…;`, "payloads are cut at 200 bytes")
	require.NotContains(t, msg, long[:250])
}
