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

// Feeding a new consumer the history it missed: ReplayTo publishes the
// delivered events a filter selects to the consumer's sink, in ID order,
// and changes nothing in the outbox.
func ExampleManager_ReplayTo() {
	ctx := context.Background()
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	db := outbox.Postgres(pool)
	schema := fmt.Sprintf("example_replay_%d", rand.Uint32())
	defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	if _, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{Schema: schema}); err != nil {
		panic(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	if _, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema}).Write(ctx, tx,
		outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: "A-1", Payload: map[string]int{"total": 10}},
		outbox.Message{EventType: "order.paid", AggregateType: "order", AggregateID: "A-1", Payload: map[string]int{"total": 10}},
		outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: "A-2", Payload: map[string]int{"total": 25}},
	); err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}
	// A relay delivered them long ago.
	if _, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "outbox_events"}.Sanitize()+
		" SET status = 'processed', processed_at = now()"); err != nil {
		panic(err)
	}

	mgr := outbox.NewManager(db, outbox.ManagerConfig{Schema: schema})
	p := outbox.ReplayParams{EventFilter: outbox.EventFilter{EventType: "order.created"}}
	n, err := mgr.CountReplay(ctx, p)
	if err != nil {
		panic(err)
	}
	fmt.Println("would replay", n)

	newConsumer := outbox.SinkFunc(func(_ context.Context, events []outbox.Event) []error {
		for _, e := range events {
			fmt.Println("new consumer got", e.EventType, e.AggregateID, string(e.Payload))
		}
		return nil
	})
	res, err := mgr.ReplayTo(ctx, newConsumer, p)
	if err != nil {
		// res.LastID says where to resume: p.AfterID = res.LastID.
		panic(err)
	}
	fmt.Println("published", res.Published)
	// Output:
	// would replay 2
	// new consumer got order.created A-1 {"total": 10}
	// new consumer got order.created A-2 {"total": 25}
	// published 2
}
