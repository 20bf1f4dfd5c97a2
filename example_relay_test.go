package outbox_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// Running a relay that hands events to an in-process function. A real
// deployment passes a sink such as stdoutsink or webhooksink and calls
// Run(ctx) until a signal arrives.
func ExampleRelay() {
	ctx := context.Background()
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	db := outbox.Postgres(pool)
	schema := fmt.Sprintf("example_relay_%d", rand.Uint32())
	defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	if _, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{Schema: schema}); err != nil {
		panic(err)
	}

	delivered := make(chan outbox.Event, 1)
	sink := outbox.SinkFunc(func(ctx context.Context, events []outbox.Event) []error {
		for _, e := range events {
			select {
			case delivered <- e:
			case <-ctx.Done():
				return outbox.BatchError(len(events), ctx.Err()) // retried later
			}
		}
		return nil // every event delivered
	})
	relay, err := outbox.NewRelay(db, outbox.RelayConfig{
		Sink:   sink,
		Schema: schema,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	if err := relay.Start(ctx); err != nil {
		panic(err)
	}

	writer := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, outbox.Message{
			EventType: "invoice.created", AggregateType: "invoice", AggregateID: "456",
			Payload: map[string]int{"amount_cents": 9900},
		})
		return err
	})
	if err != nil {
		panic(err)
	}
	relay.Wake() // claim now instead of at the next poll

	e := <-delivered
	fmt.Println("delivered:", e.ID, e.EventType, e.AggregateType, e.AggregateID, string(e.Payload))

	// Stop lets the batch in flight be marked before it returns.
	if err := relay.Stop(ctx); err != nil {
		panic(err)
	}
	stats, err := outbox.NewManager(db, outbox.ManagerConfig{Schema: schema}).Stats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("processed:", stats.Processed, "pending:", stats.Pending)
	// Output:
	// delivered: 1 invoice.created invoice 456 {"amount_cents": 9900}
	// processed: 1 pending: 0
}
