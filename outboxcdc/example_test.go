package outboxcdc_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxcdc"
	"github.com/outboxkit/outbox/sink/stdoutsink"
)

// The capture relay streams committed events from the slot; its table
// path, an outbox.Relay with CaptureSlot, retries the events whose
// publish failed and delivers those written before the slot existed.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	sink := stdoutsink.New(os.Stdout)

	stream, err := outboxcdc.New(pool, &pool.Config().ConnConfig.Config, outboxcdc.Config{Sink: sink, MaxAttempts: 5})
	if err != nil {
		log.Fatal(err)
	}
	slot, err := stream.Prepare(ctx) // checks wal_level, creates the publication and the slot
	if err != nil {
		log.Fatal(err)
	}
	table, err := outbox.NewRelay(outbox.Postgres(pool), outbox.RelayConfig{Sink: sink, MaxAttempts: 5, CaptureSlot: slot.Name})
	if err != nil {
		log.Fatal(err)
	}
	if err := table.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = table.Stop(context.Background()) }()
	if err := stream.Run(ctx); err != nil { // streams, or stands by, until ctx ends
		log.Fatal(err)
	}
}
