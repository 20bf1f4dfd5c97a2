package outbox

import "context"

// Sink delivers events to where they are going: a broker, a webhook, an
// in-process handler.
//
// Publish delivers a batch and returns one error per event, in order: nil
// for an event that was delivered (acknowledged by the broker), an error for
// one that was not. Errors are retried with backoff unless wrapped with
// Permanent. Returning a nil slice means every event was delivered. A slice
// of the wrong length is a sink bug; the relay then retries the whole batch.
//
// Publish must return when ctx ends; the relay bounds each call by its sink
// timeout, which is shorter than the lease. Publish may be called from
// several goroutines at once.
//
// When KeyOrdered(ctx) reports true, Publish must also keep each
// aggregate's events in batch order, as KeyOrdered describes; when it
// reports false, no order is asked for. PublishKeyRuns (for a sink that
// sends one event at a time) and PublishKeyWaves (for one that pipelines a
// batch) do the bookkeeping; sinktest.Run checks it.
type Sink interface {
	Publish(ctx context.Context, events []Event) []error
}

// HealthChecker is implemented by sinks that can check cheaply whether
// their destination is reachable (a ping, a metadata request, a connection
// state). While the sink's circuit is open (see Unavailable) the relay
// probes with Health instead of a trial publish of events. Health
// returns nil when the destination can take events, and must return when
// ctx ends.
type HealthChecker interface {
	Health(ctx context.Context) error
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, events []Event) []error

// Publish calls f.
func (f SinkFunc) Publish(ctx context.Context, events []Event) []error { return f(ctx, events) }

// BatchError returns n copies of err: the result for a batch that failed as
// a whole, such as on a lost connection.
func BatchError(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}
