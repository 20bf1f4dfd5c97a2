package outbox_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// Writing events in the same pgx transaction as the business row they
// describe: both commit, or neither does.
func ExampleWriter_Write() {
	ctx := context.Background()
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	// The example works in a schema of its own; applications usually keep
	// the default, public.
	schema := fmt.Sprintf("example_write_%d", rand.Uint32())
	defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	if _, err := outboxmigrate.Migrate(ctx, outbox.Postgres(pool), outboxmigrate.Config{Schema: schema}); err != nil {
		panic(err)
	}
	orders := pgx.Identifier{schema, "orders"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+orders+" (id text PRIMARY KEY, total numeric NOT NULL)"); err != nil {
		panic(err)
	}

	writer := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+orders+" (id, total) VALUES ($1, $2)", "o-1", 12.50); err != nil {
			return err
		}
		res, err := writer.Write(ctx, tx,
			outbox.Message{
				EventType: "order.created", AggregateType: "order", AggregateID: "o-1",
				Payload:       map[string]any{"order_id": "o-1", "total": 12.50},
				CorrelationID: "req-42",
			},
			outbox.Message{
				EventType: "order.paid", AggregateType: "order", AggregateID: "o-1",
				Payload: []byte(`{"order_id": "o-1"}`), // JSON bytes are stored as they are
			},
		)
		if err != nil {
			return err
		}
		fmt.Println("event IDs:", res.IDs)
		fmt.Println("duplicates:", res.Duplicates)
		return nil
	})
	if err != nil {
		panic(err)
	}

	// The events are pending until a relay claims them.
	mgr := outbox.NewManager(outbox.Postgres(pool), outbox.ManagerConfig{Schema: schema})
	e, err := mgr.Event(ctx, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(e.EventType, e.Status, string(e.Payload), e.CorrelationID())
	// Output:
	// event IDs: [1 2]
	// duplicates: []
	// order.created pending {"total": 12.5, "order_id": "o-1"} req-42
}
