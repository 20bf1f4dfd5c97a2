package stdoutsink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/stdoutsink"
)

// Writing events as JSON lines to standard output.
func Example() {
	sink := stdoutsink.New(os.Stdout)
	created := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	errs := sink.Publish(context.Background(), []outbox.Event{
		{
			ID: 1, EventType: "order.created", AggregateType: "order", AggregateID: "o-1",
			Payload:   json.RawMessage(`{"total": 12.50}`),
			Headers:   map[string]string{outbox.HeaderCorrelationID: "c-1"},
			CreatedAt: created,
		},
		{ID: 2, EventType: "order.paid", AggregateType: "order", AggregateID: "o-1", Payload: json.RawMessage(`{}`)},
	})
	fmt.Println("errors:", errs)
	// Output:
	// {"id":1,"event_type":"order.created","aggregate_type":"order","aggregate_id":"o-1","payload":{"total":12.50},"headers":{"correlation_id":"c-1"},"created_at":"2024-05-06T07:08:09Z"}
	// {"id":2,"event_type":"order.paid","aggregate_type":"order","aggregate_id":"o-1","payload":{}}
	// errors: []
}

// Running a relay that prints every event it claims. The example needs a
// database, so it is compiled but not run.
func Example_relay() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	relay, err := outbox.NewRelay(outbox.Postgres(pool), outbox.RelayConfig{Sink: stdoutsink.New(nil)})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
