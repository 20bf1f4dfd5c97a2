package outboxalert_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxalert"
)

// Posting dead letters to an alert webhook. Here the webhook is a local
// server that prints what it receives.
func Example() {
	received := make(chan outboxalert.Alert, 1)
	webhook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var alert outboxalert.Alert
		_ = json.NewDecoder(r.Body).Decode(&alert)
		received <- alert
		w.WriteHeader(http.StatusNoContent)
	}))
	defer webhook.Close()

	alerter, err := outboxalert.New(outboxalert.Config{URL: webhook.URL, Schema: "shop", Interval: time.Minute})
	if err != nil {
		panic(err)
	}
	defer alerter.Close(context.Background()) // sends what is still pending
	// A relay calls this; production code passes the alerter in
	// outbox.RelayConfig.Hooks.
	relayCfg := outbox.RelayConfig{Hooks: []outbox.Hook{alerter}}
	_ = relayCfg
	alerter.OnDeadLetter(context.Background(),
		outbox.Event{ID: 42, EventType: "order.created", AggregateType: "order", AggregateID: "7", Attempts: 5, LastError: "broker unavailable"},
		errors.New("broker unavailable"))

	alert := <-received
	fmt.Println(alert.Kind, alert.Count, alert.Events[0].ID)
	fmt.Println(alert.Text)
	// Output:
	// outbox.dead_letter 1 42
	// outbox: event 42 (order.created, order 7) dead-lettered in schema shop after 5 attempts: broker unavailable
}
