package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/outboxkit/outbox"
)

// A sink marks the errors that every event would meet (it cannot reach its
// destination at all) with Unavailable: the relay then spends no attempts
// on them, stops claiming and probes the sink until it answers. An error
// about one event (a rejection) stays unmarked and spends an attempt.
func ExampleUnavailable() {
	send := func(ctx context.Context, e outbox.Event) error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", "127.0.0.1:1") // nothing listens on port 1
		if err != nil {
			return outbox.Unavailable(fmt.Errorf("mysink: event %d: %w", e.ID, err))
		}
		defer conn.Close()
		return errors.New("mysink: rejected") // the destination's answer about this event
	}
	sink := outbox.SinkFunc(func(ctx context.Context, events []outbox.Event) []error {
		errs := make([]error, len(events))
		for i, e := range events {
			errs[i] = send(ctx, e)
		}
		return errs
	})

	errs := sink.Publish(context.Background(), []outbox.Event{{ID: 1}})
	fmt.Println(outbox.IsUnavailable(errs[0]), outbox.IsPermanent(errs[0]))
	// Output: true false
}
