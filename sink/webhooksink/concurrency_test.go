package webhooksink_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/webhooksink"
	"github.com/outboxkit/outbox/sinktest"
)

// barrier makes the first n requests wait for each other: each holds its
// answer until n requests are in the server at once. A sink that sends
// fewer than n at a time never gets past it, and its requests time out.
func barrier(srv *server, n int32) {
	var entered atomic.Int32
	allIn := make(chan struct{})
	srv.setRespond(func(w http.ResponseWriter, r *http.Request) {
		if entered.Add(1) == n {
			close(allIn)
		}
		select {
		case <-allIn:
			w.WriteHeader(http.StatusNoContent)
		case <-r.Context().Done():
		}
	})
}

func events(n int) []outbox.Event {
	es := make([]outbox.Event, n)
	for i := range es {
		es[i] = sinktest.NewEvent("order.created", `{"n":1}`)
	}
	return es
}

func TestBatchIsSentConcurrently(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	barrier(srv, 16)
	s := newSink(t, srv, webhooksink.Config{}) // ConcurrencyDefault is 16
	ctx, cancel := context.WithTimeout(t.Context(), sinktest.Timeout)
	defer cancel()
	// Each request waits for all 16: the batch finishes only if all 16
	// were in flight at once, that is in about one request's time.
	require.Nil(t, s.Publish(ctx, events(16)), "a slow endpoint must not serialize the batch")
	require.Equal(t, int32(16), srv.maxIn.Load())
}

func TestConcurrencyIsBounded(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	barrier(srv, 3)
	s := newSink(t, srv, webhooksink.Config{Concurrency: 3})
	ctx, cancel := context.WithTimeout(t.Context(), sinktest.Timeout)
	defer cancel()
	require.Nil(t, s.Publish(ctx, events(20)))
	require.Len(t, srv.received(), 20)
	require.Equal(t, int32(3), srv.maxIn.Load(), "Concurrency 3 was reached and never exceeded")
}

// gate holds every request until release is called; full is closed once
// n requests are held at once.
func gate(srv *server, n int32) (full <-chan struct{}, release func()) {
	var entered atomic.Int32
	fullCh, releaseCh := make(chan struct{}), make(chan struct{})
	srv.setRespond(func(w http.ResponseWriter, r *http.Request) {
		if entered.Add(1) == n {
			close(fullCh)
		}
		select {
		case <-releaseCh:
			w.WriteHeader(http.StatusNoContent)
		case <-r.Context().Done():
		}
	})
	var once sync.Once
	return fullCh, func() { once.Do(func() { close(releaseCh) }) }
}

func TestConcurrencyIsBoundedAcrossPublishCalls(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	full, release := gate(srv, 4)
	defer release()
	s := newSink(t, srv, webhooksink.Config{Concurrency: 4})
	ctx, cancel := context.WithTimeout(t.Context(), sinktest.Timeout)
	defer cancel()
	var wg sync.WaitGroup
	results := make([][]error, 3)
	for i := range results {
		wg.Go(func() { results[i] = s.Publish(ctx, events(8)) })
	}
	select {
	case <-full:
	case <-ctx.Done():
		require.FailNow(t, "4 requests never were in flight at once")
	}
	// Three batches have 12 workers between them. With the limit held,
	// give any worker that ignores the sink-wide limit time to show up:
	// this can only miss a bug, never fail a correct sink.
	<-time.After(100 * time.Millisecond)
	require.Equal(t, int32(4), srv.inFlight.Load(), "Concurrency bounds the sink, not each batch")
	release()
	wg.Wait()
	for _, errs := range results {
		require.Nil(t, errs)
	}
	require.Len(t, srv.received(), 24)
	require.Equal(t, int32(4), srv.maxIn.Load())
}

func TestConcurrencyOneSendsInOrder(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	s := newSink(t, srv, webhooksink.Config{Concurrency: 1})
	es := events(10)
	require.Nil(t, s.Publish(t.Context(), es))
	got := srv.received()
	require.Len(t, got, len(es))
	for i, r := range got {
		require.Equal(t, itoa(es[i].ID), r.Header.Get("Ce-Id"))
	}
	require.Equal(t, int32(1), srv.maxIn.Load())
}

func TestOneFailureDoesNotFailTheBatch(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	es := events(6)
	srv.setRespond(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Ce-Id") {
		case itoa(es[1].ID):
			w.WriteHeader(http.StatusUnprocessableEntity)
		case itoa(es[4].ID):
			w.WriteHeader(http.StatusBadGateway)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	})
	s := newSink(t, srv, webhooksink.Config{Concurrency: 3})
	errs := s.Publish(t.Context(), es)
	require.Len(t, errs, 6)
	for i, err := range errs {
		switch i {
		case 1:
			require.True(t, outbox.IsPermanent(err))
		case 4:
			require.Error(t, err)
			require.False(t, outbox.IsPermanent(err))
		default:
			require.NoError(t, err, "event %d", i)
		}
	}
}

func TestKeyOrderedSendsAggregatesConcurrently(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	// The first request of each of 4 aggregates waits until all 4 are in
	// flight; no aggregate may ever have two requests in flight.
	var (
		mu       sync.Mutex
		inFlight = map[string]bool{}
		overlap  atomic.Bool
		entered  atomic.Int32
	)
	allIn := make(chan struct{})
	srv.setRespond(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("ce-subject")
		mu.Lock()
		if inFlight[key] {
			overlap.Store(true)
		}
		inFlight[key] = true
		mu.Unlock()
		if entered.Add(1) == 4 {
			close(allIn)
		}
		select {
		case <-allIn:
			w.WriteHeader(http.StatusNoContent)
		case <-r.Context().Done():
		}
		mu.Lock()
		inFlight[key] = false
		mu.Unlock()
	})
	s := newSink(t, srv, webhooksink.Config{Concurrency: 4})
	// 8 aggregates with 5 events each, taking turns.
	var es []outbox.Event
	for range 5 {
		for k := range 8 {
			e := sinktest.NewEvent("order.created", `{"n":1}`)
			e.AggregateID = "order-" + itoa(int64(k))
			es = append(es, e)
		}
	}
	ctx, cancel := context.WithTimeout(outbox.WithKeyOrder(t.Context()), sinktest.Timeout)
	defer cancel()
	require.Nil(t, s.Publish(ctx, es))
	require.False(t, overlap.Load(), "two requests of one aggregate were in flight at once")
	require.Equal(t, int32(4), srv.maxIn.Load(), "aggregates go concurrently, up to Concurrency")
	got := map[string][]string{}
	for _, r := range srv.received() {
		got[r.Header.Get("ce-subject")] = append(got[r.Header.Get("ce-subject")], r.Header.Get("ce-id"))
	}
	for i, e := range es {
		require.Equal(t, itoa(e.ID), got[e.AggregateID][i/8], "aggregate %s in batch order", e.AggregateID)
	}
}
