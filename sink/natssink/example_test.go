package natssink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/natssink"
)

// Publishing an event to a stream the sink creates, and reading back the
// message JetStream stored.
func Example() {
	ctx := context.Background()
	stream := fmt.Sprintf("EXAMPLE_%d", rand.Uint32())
	cfg, err := natssink.ConfigFromURL("nats://" + natsAddr() +
		"?stream=" + stream + "&create_stream=true&stream_subjects=shop.>&route=shop.{event_type}")
	if err != nil {
		log.Fatal(err)
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	sink, err := natssink.New(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()

	errs := sink.Publish(ctx, []outbox.Event{{
		ID: 42, EventType: "order.created", AggregateType: "order", AggregateID: "o-1",
		Payload:   json.RawMessage(`{"total": 12.50}`),
		Headers:   map[string]string{outbox.HeaderCorrelationID: "c-7"},
		CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
	}})
	fmt.Println("delivered:", errs == nil)

	// A consumer's view: the stored message.
	nc, err := nats.Connect("nats://" + natsAddr())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	defer js.DeleteStream(ctx, stream)
	s, err := js.Stream(ctx, stream)
	if err != nil {
		log.Fatal(err)
	}
	m, err := s.GetMsg(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("subject:", m.Subject)
	var names []string
	for name := range m.Header {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if name == jetstream.ExpectedStreamHeader {
			fmt.Printf("%s: (the stream's name)\n", name)
			continue
		}
		fmt.Printf("%s: %s\n", name, strings.Join(m.Header.Values(name), ","))
	}
	fmt.Printf("data: %s\n", m.Data)
	// Output:
	// delivered: true
	// subject: shop.order.created
	// Nats-Expected-Stream: (the stream's name)
	// Nats-Msg-Id: 42
	// ce-aggregatetype: order
	// ce-correlationid: c-7
	// ce-datacontenttype: application/json
	// ce-id: 42
	// ce-source: /outbox
	// ce-specversion: 1.0
	// ce-subject: o-1
	// ce-time: 2024-05-06T07:08:09Z
	// ce-type: order.created
	// data: {"total": 12.50}
}
