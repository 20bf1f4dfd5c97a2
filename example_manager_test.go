package outbox_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// An operator's view of a dead-lettered event: the sink rejected it
// permanently, so the relay moved it to failed at once; after the cause is
// fixed, Retry sends it back to pending with its attempts reset.
func ExampleManager() {
	ctx := context.Background()
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	db := outbox.Postgres(pool)
	schema := fmt.Sprintf("example_manager_%d", rand.Uint32())
	defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	if _, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{Schema: schema}); err != nil {
		panic(err)
	}

	// A sink that refuses everything; Permanent skips the retries.
	rejected := make(chan struct{})
	relay, err := outbox.NewRelay(db, outbox.RelayConfig{
		Schema: schema,
		Logger: slog.New(slog.DiscardHandler),
		Sink: outbox.SinkFunc(func(ctx context.Context, events []outbox.Event) []error {
			defer close(rejected)
			return outbox.BatchError(len(events), outbox.Permanent(errors.New("HTTP 422: unknown customer")))
		}),
	})
	if err != nil {
		panic(err)
	}
	if err := relay.Start(ctx); err != nil {
		panic(err)
	}
	writer := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, outbox.Message{EventType: "customer.updated", Payload: map[string]string{"id": "c-9"}})
		return err
	})
	if err != nil {
		panic(err)
	}
	relay.Wake()
	<-rejected
	if err := relay.Stop(ctx); err != nil { // waits for the failure to be recorded
		panic(err)
	}

	mgr := outbox.NewManager(db, outbox.ManagerConfig{Schema: schema})
	stats, err := mgr.Stats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("pending=%d failed=%d\n", stats.Pending, stats.Failed)

	failed, err := mgr.ListEvents(ctx, outbox.ListParams{Status: outbox.StatusFailed})
	if err != nil {
		panic(err)
	}
	for _, e := range failed {
		fmt.Printf("event %d %s: attempts=%d last_error=%q\n", e.ID, e.EventType, e.Attempts, e.LastError)
	}

	retried, err := mgr.Retry(ctx, failed[0].ID)
	if err != nil {
		panic(err)
	}
	fmt.Println("retried:", retried)
	stats, err = mgr.Stats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("pending=%d failed=%d\n", stats.Pending, stats.Failed)
	// Output:
	// pending=0 failed=1
	// event 1 customer.updated: attempts=1 last_error="HTTP 422: unknown customer"
	// retried: [1]
	// pending=1 failed=0
}
