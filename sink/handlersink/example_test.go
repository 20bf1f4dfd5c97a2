package handlersink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/handlersink"
)

// Handling an application's own events in process. The relay would call
// Publish with claimed batches; here it is called directly.
func Example() {
	sink := handlersink.New(handlersink.Config{})
	sink.Handle("order.created", func(ctx context.Context, e outbox.Event) error {
		var order struct {
			Total float64 `json:"total"`
		}
		if err := json.Unmarshal(e.Payload, &order); err != nil {
			// Retrying will not make the payload parse: dead-letter it.
			return outbox.Permanent(err)
		}
		fmt.Printf("order %s created, total %.2f\n", e.AggregateID, order.Total)
		return nil
	})
	sink.Handle("order.paid", func(ctx context.Context, e outbox.Event) error {
		return errors.New("payment service unavailable") // retried with backoff
	})

	errs := sink.Publish(context.Background(), []outbox.Event{
		{ID: 1, EventType: "order.created", AggregateID: "o-1", Payload: json.RawMessage(`{"total":12.5}`)},
		{ID: 2, EventType: "order.paid", AggregateID: "o-1", Payload: json.RawMessage(`{}`)},
		{ID: 3, EventType: "order.shipped", AggregateID: "o-1", Payload: json.RawMessage(`{}`)},
	})
	for i, err := range errs {
		fmt.Printf("event %d: permanent=%v err=%v\n", i+1, outbox.IsPermanent(err), err)
	}
	// Output:
	// order o-1 created, total 12.50
	// event 1: permanent=false err=<nil>
	// event 2: permanent=false err=handlersink: handler for "order.paid" failed on event 2: payment service unavailable
	// event 3: permanent=true err=handlersink: no handler for event type "order.shipped" (event 3): register one with Handle or HandleAll, then retry the dead-lettered events
}

// A fallback handler receives every event type without a handler of its
// own, for example to forward them elsewhere.
func ExampleSink_HandleAll() {
	sink := handlersink.New(handlersink.Config{Concurrency: 1})
	sink.Handle("user.deleted", func(ctx context.Context, e outbox.Event) error {
		fmt.Println("erase user", e.AggregateID)
		return nil
	})
	sink.HandleAll(func(ctx context.Context, e outbox.Event) error {
		fmt.Println("audit", e.EventType, e.AggregateID)
		return nil
	})
	errs := sink.Publish(context.Background(), []outbox.Event{
		{ID: 1, EventType: "user.created", AggregateID: "u-7"},
		{ID: 2, EventType: "user.deleted", AggregateID: "u-7"},
	})
	fmt.Println("all delivered:", errs == nil)
	// Output:
	// audit user.created u-7
	// erase user u-7
	// all delivered: true
}

// memLedger is a HandlerLedger in memory, for the example; PostgresLedger
// keeps the record in the database.
type memLedger struct{ done map[string][]string }

func (l *memLedger) Succeeded(_ context.Context, ids []string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, id := range ids {
		out[id] = l.done[id]
	}
	return out, nil
}

func (l *memLedger) RecordSuccess(_ context.Context, id string, handler string) error {
	l.done[id] = append(l.done[id], handler)
	return nil
}

// Two listeners of one event type. The notification fails the first time,
// so the event fails and is retried; with a ledger the retry runs only the
// notification, not the audit again.
func ExampleSink_HandleNamed() {
	sink := handlersink.New(handlersink.Config{Ledger: &memLedger{done: map[string][]string{}}})
	mailDown := true
	sink.HandleNamed("order.paid", "notify", func(ctx context.Context, e outbox.Event) error {
		if mailDown {
			mailDown = false
			return errors.New("mail server down")
		}
		fmt.Println("receipt sent for", e.AggregateID)
		return nil
	})
	sink.HandleNamed("order.paid", "audit", func(ctx context.Context, e outbox.Event) error {
		fmt.Println("audit row for", e.AggregateID)
		return nil
	})
	batch := []outbox.Event{{ID: 7, EventType: "order.paid", AggregateID: "o-1"}}
	fmt.Println("first attempt:", sink.Publish(context.Background(), batch)[0])
	fmt.Println("retry delivered:", sink.Publish(context.Background(), batch) == nil)
	// Output:
	// audit row for o-1
	// first attempt: handlersink: handler "notify" for "order.paid" failed on event 7: mail server down
	// receipt sent for o-1
	// retry delivered: true
}
