package drivertest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
)

// Contention is the load of testConcurrentLoops: claim loops and writers
// running at once for a while.
const (
	contentionLoops   = 3
	contentionWriters = 2
	contentionBatch   = 100
	contentionPrefill = 1500
	contentionFor     = 2 * time.Second
	// contentionWriteBound is how long one writer's transaction may take:
	// far below InnoDB's 50 s lock wait timeout, so a writer that waits on
	// a relay lock until the timeout fails the test.
	contentionWriteBound = 10 * time.Second
)

// testConcurrentLoops runs several claim-and-mark loops, as a relay's
// workers and several relays do, while writers commit events, once per
// retention mode: no claim, mark or write may fail (a deadlock victim, a
// lock wait timeout, a busy database), and every event is marked exactly
// once. On MySQL/MariaDB this is where the marks' locks meet the claims'
// and the writers': a mark that scanned an index range or the whole (small)
// table instead of looking its IDs up by primary key locked rows of other
// batches and deadlocked with their claims and marks.
func testConcurrentLoops(t *testing.T, h Harness) {
	for _, mode := range []driver.Retention{driver.RetainProcessed, driver.RetainDelete, driver.RetainArchive} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			runConcurrentLoops(t, h, mode)
		})
	}
}

func runConcurrentLoops(t *testing.T, h Harness, mode driver.Retention) {
	b := setup(t, h)
	for range contentionPrefill / 500 {
		b.insert(t, 500)
	}
	var (
		written  atomic.Int64
		marked   atomic.Int64
		slowest  atomic.Int64 // nanoseconds of the slowest writer transaction
		writing  = make(chan struct{})
		writers  sync.WaitGroup
		loops    sync.WaitGroup
		failOnce sync.Once
		failed   = make(chan struct{})
	)
	written.Store(contentionPrefill)
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		failOnce.Do(func() { close(failed) })
	}
	stopped := func() bool {
		select {
		case <-failed:
			return true
		default:
			return false
		}
	}
	for w := range contentionWriters {
		writers.Go(func() {
			msgs := make([]outbox.Message, 5)
			for txn := 0; ; txn++ {
				select {
				case <-writing:
					return
				case <-failed:
					return
				default:
				}
				for i := range msgs {
					msgs[i] = outbox.Message{EventType: "contended", AggregateID: fmt.Sprint(w, "-", txn, "-", i), Payload: json.RawMessage(`{}`)}
				}
				start := time.Now()
				if err := b.writeOnce(msgs); err != nil {
					fail("writer %d: %v", w, err)
					return
				}
				took := time.Since(start)
				if took > time.Duration(slowest.Load()) {
					slowest.Store(int64(took))
				}
				written.Add(int64(len(msgs)))
			}
		})
	}
	// Each loop stops once the writers have stopped and a claim comes back
	// empty: then every written event has been marked.
	var writersDone atomic.Bool
	for l := range contentionLoops {
		loops.Go(func() {
			relay := fmt.Sprint("loop-", l)
			for !stopped() {
				c, err := b.drv.Claim(b.ctx, driver.ClaimParams{RelayID: relay, BatchSize: contentionBatch, Lease: time.Minute})
				if err != nil {
					fail("%s: claim: %v", relay, err)
					return
				}
				if len(c.Events) == 0 {
					if writersDone.Load() {
						return
					}
					time.Sleep(5 * time.Millisecond) // the relay's idle poll
					continue
				}
				n, err := b.drv.MarkProcessed(b.ctx, driver.Fence{RelayID: relay, LockedUntil: c.LockedUntil}, claimIDs(c), mode)
				if err != nil {
					fail("%s: mark %s: %v", relay, mode, err)
					return
				}
				if n != int64(len(c.Events)) {
					fail("%s: marked %d of %d claimed events", relay, n, len(c.Events))
					return
				}
				marked.Add(n)
			}
		})
	}
	select {
	case <-time.After(contentionFor):
	case <-failed:
	}
	close(writing)
	writers.Wait()
	writersDone.Store(true)
	loops.Wait()
	require.False(t, t.Failed())
	if r, ok := b.drv.(interface{ Retried() int64 }); ok {
		// The driver runs a deadlock victim again by itself; the relay's
		// own statements must not need that.
		require.Zero(t, r.Retried(), "transactions retried after a deadlock or lock wait timeout")
	}
	require.Less(t, time.Duration(slowest.Load()), contentionWriteBound, "a writer waited on the relay's locks")

	total := written.Load()
	t.Logf("%d events written and marked; slowest writer transaction %v", total, time.Duration(slowest.Load()).Round(time.Millisecond))
	require.Greater(t, total, int64(contentionPrefill), "the writers wrote nothing")
	require.Equal(t, total, marked.Load(), "every event marked exactly once")
	s, err := b.mgr.Stats(b.ctx)
	require.NoError(t, err)
	require.Zero(t, s.Pending+s.Processing+s.Failed)
	switch mode {
	case driver.RetainProcessed:
		require.EqualValues(t, total, s.Processed)
	case driver.RetainDelete:
		require.Zero(t, b.db.Count(t, b.db.Table))
	case driver.RetainArchive:
		require.Zero(t, b.db.Count(t, b.db.Table))
		require.EqualValues(t, total, b.db.Count(t, b.db.Archive))
	}
}

// writeOnce commits msgs in one application transaction.
func (b bundle) writeOnce(msgs []outbox.Message) error {
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	tx, err := b.db.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.Write(ctx, b.writer, msgs...); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}
