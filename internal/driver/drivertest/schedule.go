package drivertest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver"
)

// acquire takes or renews the lease "job" for holder.
func (b bundle) acquire(t testing.TB, holder string, ttl time.Duration) bool {
	t.Helper()
	held, err := b.drv.AcquireLease(b.ctx, driver.LeaseParams{Name: "job", Holder: holder, TTL: ttl})
	require.NoError(t, err)
	return held
}

func testLease(t *testing.T, h Harness) {
	b := setup(t, h)
	require.True(t, b.acquire(t, "a", time.Minute), "a free lease is taken")
	require.True(t, b.acquire(t, "a", time.Minute), "the holder renews")
	require.False(t, b.acquire(t, "b", time.Minute), "a held lease is not taken")
	other, err := b.drv.AcquireLease(b.ctx, driver.LeaseParams{Name: "other", Holder: "b", TTL: time.Minute})
	require.NoError(t, err)
	require.True(t, other, "leases are per name")

	require.NoError(t, b.drv.ReleaseLease(b.ctx, "job", "b"), "releasing a lease one does not hold is a no-op")
	require.False(t, b.acquire(t, "b", time.Minute))
	require.NoError(t, b.drv.ReleaseLease(b.ctx, "job", "a"))
	require.True(t, b.acquire(t, "b", time.Minute), "a released lease is taken at once")
	require.False(t, b.acquire(t, "a", time.Minute))

	// b renews for a moment only; once it expires, by the database clock,
	// a takes it over and b cannot renew.
	require.True(t, b.acquire(t, "b", 20*time.Millisecond))
	deadline := time.Now().Add(10 * time.Second)
	for !b.acquire(t, "a", time.Minute) {
		require.True(t, time.Now().Before(deadline), "a never took over the expired lease")
		time.Sleep(10 * time.Millisecond) // poll interval, not a wait for async work
	}
	require.False(t, b.acquire(t, "b", time.Minute), "the old holder lost it")
	require.True(t, b.acquire(t, "a", time.Minute))
}

func testLeaseRace(t *testing.T, h Harness) {
	b := setup(t, h)
	const n = 6
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins []string
	)
	for i := range n {
		holder := string(rune('a' + i))
		wg.Go(func() {
			held, err := b.drv.AcquireLease(b.ctx, driver.LeaseParams{Name: "job", Holder: holder, TTL: time.Minute})
			if err != nil {
				t.Error(err)
				return
			}
			if held {
				mu.Lock()
				wins = append(wins, holder)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, wins, 1, "exactly one of the racing relays holds the lease")
	for i := range n {
		holder := string(rune('a' + i))
		require.Equal(t, holder == wins[0], b.acquire(t, holder, time.Minute), holder)
	}
}

func testDeadLetterRetry(t *testing.T, h Harness) {
	b := setup(t, h)
	ids := b.insert(t, 3)
	b.deadLetter(t, "broken", ids...)
	p := driver.DeadLetterRetryParams{After: time.Hour, MaxRetries: 2, BatchSize: 2}
	schedule := func() int64 {
		t.Helper()
		n, err := b.drv.ScheduleDeadLetterRetries(b.ctx, p)
		require.NoError(t, err)
		return n
	}
	retry := func(batch int) int64 {
		t.Helper()
		q := p
		q.BatchSize = batch
		n, err := b.drv.RetryDeadLetters(b.ctx, q)
		require.NoError(t, err)
		return n
	}
	stats := func() driver.DeadLetterRetryStats {
		t.Helper()
		s, err := b.drv.DeadLetterRetryStats(b.ctx)
		require.NoError(t, err)
		return s
	}
	require.Equal(t, driver.DeadLetterRetryStats{}, stats())

	require.EqualValues(t, 2, schedule(), "one batch schedules at most the batch size")
	require.EqualValues(t, 1, schedule())
	require.EqualValues(t, 0, schedule(), "a scheduled retry is not moved")
	s := stats()
	require.EqualValues(t, 3, s.Waiting)
	require.WithinDuration(t, b.db.Now(t).Add(time.Hour), s.NextDue, time.Minute, "due an hour from now by the database clock")
	require.Zero(t, retry(10), "nothing is due yet")

	b.db.SetTime(t, b.db.Table, "dead_letter_retry_at", -time.Second, ids[0], ids[1])
	require.EqualValues(t, 1, retry(1), "one batch retries at most the batch size")
	require.EqualValues(t, 1, retry(10))
	require.Zero(t, retry(10))
	for _, id := range ids[:2] {
		e := b.get(t, id)
		require.Equal(t, driver.StatusPending, e.Status)
		require.Zero(t, e.Attempts, "a fresh fast-backoff cycle")
		require.Empty(t, e.LastError, "cleared, as a requeue by hand does")
	}
	require.EqualValues(t, 1, stats().Waiting)

	// A requeue by hand drops the scheduled retry.
	changed, err := b.drv.Requeue(b.ctx, ids[2:], []string{driver.StatusFailed})
	require.NoError(t, err)
	require.Equal(t, ids[2:], changed)
	require.Equal(t, driver.DeadLetterRetryStats{}, stats())

	// ids[0] fails again: its second slow retry is its last.
	b.deadLetter(t, "broken again", ids[0])
	require.EqualValues(t, 1, schedule())
	b.db.SetTime(t, b.db.Table, "dead_letter_retry_at", -time.Second, ids[0])
	require.EqualValues(t, 1, retry(10))
	require.Equal(t, driver.StatusPending, b.get(t, ids[0]).Status)
	b.deadLetter(t, "broken for good", ids[0])
	require.Zero(t, schedule(), "out of slow retries")
	require.Zero(t, retry(10))
	require.Equal(t, driver.StatusFailed, b.get(t, ids[0]).Status)
	require.Equal(t, driver.DeadLetterRetryStats{}, stats())

	// An event an operator discarded is never retried on the schedule.
	discarded, err := b.drv.Discard(b.ctx, ids[1:2], "stop it")
	require.NoError(t, err)
	require.Equal(t, ids[1:2], discarded)
	require.Zero(t, schedule(), "a discarded event has no slow retries")
	require.Equal(t, driver.DeadLetterRetryStats{}, stats())
}

// deadLetter moves the pending events ids to failed as a relay does after
// a permanent error, and hands the other events it claimed back.
func (b bundle) deadLetter(t testing.TB, msg string, ids ...int64) {
	t.Helper()
	c := b.claim(t, "dl", 1000, time.Minute)
	f := driver.Fence{RelayID: "dl", LockedUntil: c.LockedUntil}
	want := map[int64]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var (
		fails  []driver.Failure
		others []int64
	)
	for _, e := range c.Events {
		if want[e.ID] {
			fails = append(fails, driver.Failure{ID: e.ID, Error: msg, Permanent: true})
		} else {
			others = append(others, e.ID)
		}
	}
	fr, err := b.drv.MarkFailed(b.ctx, f, 5, fails)
	require.NoError(t, err)
	require.ElementsMatch(t, ids, fr.Dead)
	if len(others) > 0 {
		_, err = b.drv.Release(b.ctx, f, others)
		require.NoError(t, err)
	}
}
