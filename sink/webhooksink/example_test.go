package webhooksink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/webhooksink"
)

// Posting an event and looking at the request the endpoint receives.
func Example() {
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var names []string
		for name := range r.Header {
			if strings.HasPrefix(name, "Ce-") || name == "Content-Type" || name == "Traceparent" {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		for _, name := range names {
			fmt.Printf("%s: %s\n", name, r.Header.Get(name))
		}
		fmt.Printf("body: %s\n", body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer endpoint.Close()

	sink, err := webhooksink.New(webhooksink.Config{URL: endpoint.URL + "/outbox"})
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()

	errs := sink.Publish(context.Background(), []outbox.Event{{
		ID: 42, EventType: "order.created", AggregateType: "order", AggregateID: "o-1",
		Payload: json.RawMessage(`{"total": 12.50}`),
		Headers: map[string]string{
			outbox.HeaderCorrelationID: "c-7",
			outbox.HeaderTraceParent:   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		},
		CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
	}})
	fmt.Println("delivered:", errs == nil)
	// Output:
	// Ce-Aggregatetype: order
	// Ce-Correlationid: c-7
	// Ce-Id: 42
	// Ce-Source: /outbox
	// Ce-Specversion: 1.0
	// Ce-Subject: o-1
	// Ce-Time: 2024-05-06T07:08:09Z
	// Ce-Type: order.created
	// Content-Type: application/json
	// Traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
	// body: {"total": 12.50}
	// delivered: true
}

// A receiver that checks the Standard Webhooks signature and reads the
// CloudEvent, using the official libraries.
func Example_receiver() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	verifier, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		log.Fatal(err)
	}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := verifier.Verify(body, r.Header); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		event, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest) // permanent: dead-lettered
			return
		}
		// webhook-id and ce-id are the outbox event ID, the same on every
		// retry: a real receiver drops duplicates on it.
		fmt.Printf("verified %s %s about %s: %s\n", event.Type(), event.ID(), event.Subject(), event.Data())
		w.WriteHeader(http.StatusOK)
	}))
	defer receiver.Close()

	sink, err := webhooksink.New(webhooksink.Config{URL: receiver.URL, Secret: secret})
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()
	errs := sink.Publish(context.Background(), []outbox.Event{
		{ID: 1, EventType: "user.signed_up", AggregateID: "u-9", Payload: json.RawMessage(`{"plan":"pro"}`)},
	})
	fmt.Println("delivered:", errs == nil)
	// Output:
	// verified user.signed_up 1 about u-9: {"plan":"pro"}
	// delivered: true
}

// Configuration errors name the field and the fix, and never quote the
// URL's password.
func ExampleNew_invalidConfig() {
	_, err := webhooksink.New(webhooksink.Config{URL: "ftp://deploy:s3cret@files.example.com/hooks"})
	fmt.Println(err)
	_, err = webhooksink.New(webhooksink.Config{URL: "https://hooks.example.com", Concurrency: -1})
	fmt.Println(err)
	// Output:
	// invalid URL: ftp://files.example.com/… has scheme "ftp": use an absolute http:// or https:// URL
	// invalid Concurrency: is -1: use at least 1, or 0 for the default 16
}

// Telling retryable from permanent failures, and reading the HTTP status.
func ExampleStatusError() {
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"unknown field amount"}`, http.StatusUnprocessableEntity)
	}))
	defer endpoint.Close()
	sink, err := webhooksink.New(webhooksink.Config{URL: endpoint.URL})
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()

	errs := sink.Publish(context.Background(), []outbox.Event{{ID: 3, EventType: "order.paid", Payload: json.RawMessage(`{}`)}})
	var se *webhooksink.StatusError
	if len(errs) == 1 && errors.As(errs[0], &se) {
		fmt.Println("status:", se.StatusCode, "permanent:", outbox.IsPermanent(errs[0]))
		fmt.Println("body:", se.Body)
	}
	// Output:
	// status: 422 permanent: true
	// body: {"error":"unknown field amount"}
}
