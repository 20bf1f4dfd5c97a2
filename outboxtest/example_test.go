package outboxtest_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/outboxtest"
)

// printT stands in for a test's *testing.T in these examples: it prints a
// failure where testing.T would fail the test.
type printT struct{}

func (printT) Helper() {}

func (printT) Fatalf(format string, args ...any) { fmt.Printf("FAIL: "+format+"\n", args...) }

// placeOrder is the application code under test: it writes the order's
// event in the caller's transaction.
func placeOrder(ctx context.Context, w *outbox.Writer, tx pgx.Tx, id string, total int) error {
	_, err := w.Write(ctx, tx, outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: id,
		Payload: map[string]any{"id": id, "total": total}})
	return err
}

// A test checks what the code under test wrote in its transaction, before
// (or without) committing it.
func ExampleRequireWrittenTx() {
	ctx := context.Background()
	t := printT{} // in a test: the test's *testing.T
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	// The example works in a schema of its own; applications usually keep
	// the default, public.
	schema := fmt.Sprintf("example_outboxtest_%d", rand.Uint32())
	defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	if _, err := outboxmigrate.Migrate(ctx, outbox.Postgres(pool), outboxmigrate.Config{Schema: schema}); err != nil {
		panic(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx)
	if err := placeOrder(ctx, outbox.NewWriter(outbox.WriterConfig{Schema: schema}), tx, "42", 30); err != nil {
		panic(err)
	}

	event := outboxtest.RequireWrittenTx(ctx, t, tx, "order.created", &outboxtest.WrittenOpts{
		Schema:      schema,
		AggregateID: "42",
		Payload:     []byte(`{"total": 30, "id": "42"}`), // JSON-equal: any key order
	})
	fmt.Println(event.EventType, event.AggregateType, event.AggregateID, event.Status)
	outboxtest.RequireNotWrittenTx(ctx, t, tx, "order.cancelled", &outboxtest.WrittenOpts{Schema: schema})

	// A mismatch says what the transaction wrote instead.
	outboxtest.RequireWrittenTx(ctx, t, tx, "order.created", &outboxtest.WrittenOpts{
		Schema: schema, Payload: map[string]any{"id": "42", "total": 31}})
	// Output:
	// order.created order 42 pending
	// FAIL: outboxtest: want 1 order.created event with payload {"id":"42","total":31} visible in the transaction, found 0; order.created events there: #1 aggregate order/42 payload {"id":"42","total":30}; event types in the table: order.created ×1
}

// Applications whose transactions are database/sql ones (SQLite, MySQL,
// MariaDB, or PostgreSQL through pgx's stdlib driver, as here) use the SQL
// variants; WrittenOpts.Dialect names the database (PostgreSQL is the
// default).
func ExampleRequireManyWrittenSQLTx() {
	ctx := context.Background()
	t := printT{} // in a test: the test's *testing.T
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	schema := fmt.Sprintf("example_outboxtest_%d", rand.Uint32())
	defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	if _, err := outboxmigrate.Migrate(ctx, outbox.Postgres(pool), outboxmigrate.Config{Schema: schema}); err != nil {
		panic(err)
	}
	db := stdlib.OpenDBFromPool(pool) // the application's *sql.DB
	defer db.Close()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback()
	w := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	for _, id := range []string{"1", "2"} {
		if _, err := w.WriteSQL(ctx, tx, outbox.Message{EventType: "invoice.sent", AggregateType: "invoice", AggregateID: id,
			Payload: map[string]string{"invoice": id}, CorrelationID: "req-7"}); err != nil {
			panic(err)
		}
	}

	events := outboxtest.RequireManyWrittenSQLTx(ctx, t, tx, "invoice.sent", 2, &outboxtest.WrittenOpts{
		Schema:  schema,
		Headers: map[string]string{outbox.HeaderCorrelationID: "req-7"},
	})
	for _, e := range events {
		fmt.Println(e.ID, e.AggregateID, string(e.Payload))
	}
	// Output:
	// 1 1 {"invoice": "1"}
	// 2 2 {"invoice": "2"}
}
