package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

func TestParseVmRSS(t *testing.T) {
	t.Parallel()
	status := "Name:\tbench\nVmPeak:\t  900 kB\nVmRSS:\t   12345 kB\nThreads:\t9\n"
	require.EqualValues(t, 12345*1024, parseVmRSS([]byte(status)))
	require.Zero(t, parseVmRSS([]byte("Name:\tbench\n")))
	require.Zero(t, parseVmRSS([]byte("VmRSS:\tlots kB\n")))
	require.Positive(t, readRSS(), "this test runs on Linux")
}

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	stat := "cpu  100 5 50 1000 20 3 7 2 40 0\ncpu0 60 5 20 500 10 1 3 1 20 0\ncpu1 40 0 30 500 10 2 4 1 20 0\n" +
		"intr 1 2 3\nctxt 99\ncpus_allowed 4\n"
	c, ok := parseProcStat([]byte(stat))
	require.True(t, ok)
	// user+nice+system+irq+softirq+steal; guest (40) is in user already.
	require.Equal(t, machineCPU{busy: 100 + 5 + 50 + 3 + 7 + 2, idle: 1000 + 20, cores: 2}, c,
		"cpu0 and cpu1 are cores, cpus_allowed is not")
	later := c
	later.busy += 250
	require.InDelta(t, 2.5, later.busySince(c), 1e-12)
	_, ok = parseProcStat([]byte("cpu  1 2 3\ncpu0 1 2 3\n"))
	require.False(t, ok, "too few fields")
	_, ok = parseProcStat([]byte("intr 1\n"))
	require.False(t, ok)
	c, ok = readMachineCPU()
	require.True(t, ok, "this test runs on Linux")
	require.Positive(t, c.cores)
	require.Equal(t, c.cores, machineCores())
}

func TestCPULimit(t *testing.T) {
	t.Parallel()
	// 2 cores, 20 µs + 30 µs per event: 40,000 events/s fill both.
	require.InDelta(t, 40000, cpuLimit(2, 20e-6, 30e-6), 1e-6)
	require.Zero(t, cpuLimit(0, 20e-6, 30e-6))
	require.Zero(t, cpuLimit(2, 0, 30e-6), "a cost not measured gives no limit")
	require.InDelta(t, 2e-6, cpuPerEvent(Report{Events: 1000, MachineCPUBusyS: 0.002}), 1e-18)
	require.Zero(t, cpuPerEvent(Report{MachineCPUBusyS: 1}))
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, 50*time.Millisecond, percentile(d, 0.50))
	require.Equal(t, 99*time.Millisecond, percentile(d, 0.99))
	require.Equal(t, 100*time.Millisecond, percentile(d, 1))
	require.Equal(t, time.Millisecond, percentile(d, 0.001))
	require.Zero(t, percentile(nil, 0.5))
	require.Equal(t, 7*time.Millisecond, percentile([]time.Duration{7 * time.Millisecond}, 0.99))
}

func TestRecorder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	boom := errors.New("boom")
	fail := map[int64]bool{}
	inner := outbox.SinkFunc(func(_ context.Context, events []outbox.Event) []error {
		errs := make([]error, len(events))
		for i, e := range events {
			if fail[e.ID] {
				errs[i] = boom
			}
		}
		return errs
	})
	rec := newRecorder(inner, 2)
	ev := func(ids ...int64) []outbox.Event {
		out := make([]outbox.Event, len(ids))
		for i, id := range ids {
			out[i].ID = id
		}
		return out
	}
	rec.Publish(ctx, ev(1, 2))
	rec.Publish(ctx, ev(2, 50)) // 2 again; 50 grows the slice
	delivered, dups, failed := rec.counts()
	require.Equal(t, [3]int64{3, 1, 0}, [3]int64{delivered, dups, failed})
	require.True(t, rec.allAcked([]int64{1, 2, 50}))
	require.False(t, rec.allAcked([]int64{1, 3}))
	at1, ok := rec.ackedAt(1)
	require.True(t, ok)
	at2, _ := rec.ackedAt(2)
	require.False(t, at2.Before(at1), "the first ack is kept")
	require.NoError(t, rec.err())

	fail[7] = true
	rec.Publish(ctx, ev(7))
	require.ErrorIs(t, rec.err(), errSinkFailed)
	require.ErrorIs(t, rec.err(), boom)
	_, ok = rec.ackedAt(7)
	require.False(t, ok)

	// A sink that answers with the wrong number of results fails the batch.
	short := newRecorder(outbox.SinkFunc(func(context.Context, []outbox.Event) []error { return []error{nil} }), 0)
	short.Publish(ctx, ev(1, 2))
	_, _, failed = short.counts()
	require.EqualValues(t, 2, failed)
}

func TestPace(t *testing.T) {
	t.Parallel()
	tokens := make(chan struct{})
	done := make(chan time.Duration, 1)
	go func() { done <- pace(context.Background(), 200, 500*time.Millisecond, tokens) }()
	n := 0
	for range tokens {
		n++
	}
	window := <-done
	require.GreaterOrEqual(t, window, 500*time.Millisecond)
	// 200/s for half a second: never more, and (allowing for a loaded
	// machine that delays the last ticks) not far less.
	require.LessOrEqual(t, n, 100)
	require.GreaterOrEqual(t, n, 60)
}
