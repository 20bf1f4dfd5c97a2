package cli

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCachedCheckRunsOncePerTTL(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	check := cachedCheck(time.Hour, func(context.Context) error {
		calls.Add(1)
		return errors.New("down")
	})
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { require.EqualError(t, check(context.Background()), "down") })
	}
	wg.Wait()
	require.EqualValues(t, 1, calls.Load(), "concurrent probes share one check")

	fresh := cachedCheck(0, func(context.Context) error { calls.Add(1); return nil })
	require.NoError(t, fresh(context.Background()))
	require.NoError(t, fresh(context.Background()))
	require.EqualValues(t, 3, calls.Load(), "a zero TTL checks every time")
}

func TestReadinessNamesEveryCheck(t *testing.T) {
	t.Parallel()
	r := &readiness{redact: &redactor{}}
	r.redact.add("S3cret")
	r.add("relay", func(context.Context) error { return nil })
	r.add("sink", func(context.Context) error { return errors.New("circuit open:\nbroker at S3cret@host refused") })
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, "not ready\nrelay: ok\nsink: circuit open: broker at "+redactMask+"@host refused\n", rec.Body.String())
}

func TestRelayStateCheck(t *testing.T) {
	t.Parallel()
	ctx, stop := context.WithCancel(context.Background())
	s := &relayState{stopping: ctx}
	require.EqualError(t, s.check(ctx), "starting", "no relay yet")
	stop()
	require.EqualError(t, s.check(ctx), "stopping", "a signal arrived")
}
