// Command nats shows the outbox end to end with NATS JetStream: it migrates
// a schema of its own, writes three events in one transaction, relays them
// with natssink into a stream it creates, and reads them back with a
// JetStream consumer, printing what arrived. It removes the schema and the
// stream when done.
//
//	go run ./examples/nats -db postgres://postgres@127.0.0.1:5432/test -nats nats://127.0.0.1:4222
package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/examples/internal/demo"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/natssink"
)

func main() {
	demo.Main("nats", demo.Flag{
		Name: "nats", Env: "NATS_URL", Default: "nats://127.0.0.1:4222",
		Usage: "NATS sink URL (or $NATS_URL); see package natssink for its options",
	}, run)
}

func run(ctx context.Context, d *demo.Demo, natsURL string) error {
	// The sink creates a stream of its own for the subjects it routes to.
	cfg, err := natssink.ConfigFromURL(natsURL)
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("example%d", d.ID)
	cfg.Stream = fmt.Sprintf("OUTBOX_EXAMPLE_%d", d.ID)
	cfg.CreateStream = true
	cfg.StreamSubjects = []string{prefix + ".>"}
	if cfg.Router, err = route.New(prefix + ".{aggregate_type}.{event_type}"); err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	sink, err := natssink.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = sink.Close() }()
	fmt.Println("created stream", cfg.Stream, "for", prefix+".>")

	// A consumer, as another service would run it.
	nc, err := nats.Connect(strings.Join(cfg.Servers, ","), consumerOptions(cfg)...)
	if err != nil {
		return fmt.Errorf("consumer: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), cfg.Stream) }()

	return d.Relay(ctx, sink, demo.Checkout(""), func(ctx context.Context) error {
		cons, err := js.OrderedConsumer(ctx, cfg.Stream, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return err
		}
		for received := 0; received < 3; {
			batch, err := cons.Fetch(3-received, jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				return err
			}
			for m := range batch.Messages() {
				h := m.Headers()
				fmt.Printf("received %s: ce-id=%s ce-type=%s ce-subject=%s ce-correlationid=%s Nats-Msg-Id=%s data=%s\n",
					m.Subject(), h.Get("ce-id"), h.Get("ce-type"), h.Get("ce-subject"), h.Get("ce-correlationid"),
					h.Get(jetstream.MsgIDHeader), m.Data())
				received++
			}
			if err := batch.Error(); err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("received %d of 3 events: %w", received, err)
			}
		}
		return nil
	})
}

// consumerOptions connects the consumer the way the sink connects.
func consumerOptions(cfg natssink.Config) []nats.Option {
	var opts []nats.Option
	switch {
	case cfg.Token != "":
		opts = append(opts, nats.Token(cfg.Token))
	case cfg.User != "":
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	case cfg.CredsFile != "":
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.TLS != nil {
		opts = append(opts, nats.Secure(cfg.TLS))
	}
	return opts
}
