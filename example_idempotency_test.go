package outbox_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// The classic deterministic key: the same business event on the same UTC day
// gets the same key.
func ExampleIdempotencyKey() {
	at := time.Date(2026, 4, 24, 10, 0, 0, 0, time.UTC)
	fmt.Println(outbox.IdempotencyKey("invoice", "456", "invoice.created", at))
	// The date is taken in UTC: 21:30 on the 24th in New York is the 25th.
	newYork := time.FixedZone("EDT", -4*60*60)
	fmt.Println(outbox.IdempotencyKey("invoice", "456", "invoice.created", time.Date(2026, 4, 24, 21, 30, 0, 0, newYork)))
	// Output:
	// invoice:456:invoice.created:2026-04-24
	// invoice:456:invoice.created:2026-04-25
}

// Writing the same business event twice: the second write is skipped with
// ON CONFLICT DO NOTHING and reported in Duplicates, not as an error, so the
// transaction stays usable and commits the rest.
func ExampleWriter_Write_idempotencyKey() {
	ctx := context.Background()
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	schema := fmt.Sprintf("example_idempotency_%d", rand.Uint32())
	defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	if _, err := outboxmigrate.Migrate(ctx, outbox.Postgres(pool), outboxmigrate.Config{Schema: schema}); err != nil {
		panic(err)
	}

	writer := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	created := func(invoiceID string) outbox.Message {
		return outbox.Message{
			EventType: "invoice.created", AggregateType: "invoice", AggregateID: invoiceID,
			Payload:        map[string]string{"invoice_id": invoiceID},
			IdempotencyKey: outbox.IdempotencyKey("invoice", invoiceID, "invoice.created", time.Now()),
		}
	}
	for attempt := 1; attempt <= 2; attempt++ { // e.g. a retried HTTP request
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := writer.Write(ctx, tx, created("456"), created(fmt.Sprint(456+attempt)))
			if err != nil {
				return err
			}
			fmt.Printf("attempt %d: IDs %v, duplicates at %v\n", attempt, res.IDs, res.Duplicates)
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// attempt 1: IDs [1 2], duplicates at []
	// attempt 2: IDs [0 4], duplicates at [0]
}
