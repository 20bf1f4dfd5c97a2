package outbox

import (
	"context"
	"errors"
)

// ErrEarlierEventFailed is the result a sink returns, in key-ordered mode,
// for an event it did not send because an earlier event of the same
// aggregate in the same batch was not delivered. The relay spends no attempt
// on such an event: it stays pending behind the earlier one.
var ErrEarlierEventFailed = errors.New("outbox: not sent: an earlier event of the same aggregate in this batch was not delivered")

type keyOrderKey struct{}

// WithKeyOrder returns a copy of ctx that asks sinks to keep per-aggregate
// order (see KeyOrdered). The relay calls it when RelayConfig.Ordering is
// by aggregate; tests of custom sinks call it to check their ordered path.
func WithKeyOrder(ctx context.Context) context.Context {
	return context.WithValue(ctx, keyOrderKey{}, true)
}

// KeyOrdered reports whether a Publish call must keep per-aggregate order.
// When it does, a sink must, for the events of one aggregate (the pair
// AggregateType, AggregateID) within a batch:
//   - have them acknowledged in batch order: an event is not handed to the
//     destination before the events of its aggregate earlier in the batch
//     were acknowledged, unless the destination itself keeps order across
//     in-flight messages and fails every later one when an earlier one fails
//     (a Kafka partition with the idempotent producer);
//   - not send the events after one that failed, and return
//     ErrEarlierEventFailed (or the failure itself) for them.
//
// Events of different aggregates may still go concurrently.
func KeyOrdered(ctx context.Context) bool {
	v, _ := ctx.Value(keyOrderKey{}).(bool)
	return v
}
