package backoff

import (
	"math"
	"testing"
	"time"
)

func TestUncappedSaturatesNearTheLargestDuration(t *testing.T) {
	t.Parallel()
	huge := time.Duration(math.MaxInt64)
	prev := time.Duration(0)
	for attempt := range 200 {
		d := Uncapped(attempt, time.Second, huge)
		if d <= 0 || d < prev {
			// Before the fix the doubling overflowed to negative delays
			// and then to zero: a tight retry loop.
			t.Fatalf("Uncapped(%d, 1s, max) = %v after %v: want positive and not decreasing", attempt, d, prev)
		}
		prev = d
		if j := Exponential(attempt, time.Second, huge); j <= 0 || j > d {
			t.Fatalf("Exponential(%d, 1s, max) = %v: want within (0, %v]", attempt, j, d)
		}
	}
	if prev != huge {
		t.Fatalf("Uncapped(199, 1s, max) = %v: want the cap", prev)
	}
}

func FuzzExponential(f *testing.F) {
	for _, seed := range []struct {
		attempt   int
		base, max int64
	}{
		{0, int64(time.Second), int64(5 * time.Minute)},
		{9, int64(time.Second), int64(5 * time.Minute)},
		{70, int64(time.Second), math.MaxInt64},
		{62, 3, math.MaxInt64 - 1},
		{1000, int64(time.Hour), int64(30 * 24 * time.Hour)},
		{-5, 1, 1},
		{3, 0, 10},
		{3, -1, 10},
		{math.MaxInt, math.MaxInt64 / 2, math.MaxInt64},
	} {
		f.Add(seed.attempt, seed.base, seed.max)
	}
	f.Fuzz(func(t *testing.T, attempt int, base, maxDelay int64) {
		b, m := time.Duration(base), time.Duration(maxDelay)
		d := Uncapped(attempt, b, m)
		if d < 0 || d > max(m, 0) {
			t.Fatalf("Uncapped(%d, %v, %v) = %v: want within [0, %v]", attempt, b, m, d, m)
		}
		if b > 0 && m >= b && d < b {
			t.Fatalf("Uncapped(%d, %v, %v) = %v: less than the base", attempt, b, m, d)
		}
		if j := Exponential(attempt, b, m); j < 0 || j > d {
			t.Fatalf("Exponential(%d, %v, %v) = %v: want within [0, %v]", attempt, b, m, j, d)
		}
	})
}
