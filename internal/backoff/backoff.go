// Package backoff computes capped exponential delays with jitter.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Jitter is the fraction of a delay that is randomized: a delay d becomes a
// uniform value in [d*(1-Jitter), d], so retries of a batch that failed
// together spread out and never exceed the cap.
const Jitter = 0.25

// Exponential returns base·2^attempt capped at maxDelay, with jitter.
func Exponential(attempt int, base, maxDelay time.Duration) time.Duration {
	d := Uncapped(attempt, base, maxDelay)
	return d - time.Duration(rand.Float64()*Jitter*float64(d))
}

// Uncapped returns base·2^attempt capped at maxDelay, without jitter: the
// upper bound of Exponential.
func Uncapped(attempt int, base, maxDelay time.Duration) time.Duration {
	if attempt < 0 {
		attempt = 0
	}
	if base <= 0 || maxDelay <= 0 {
		return max(min(base, maxDelay), 0)
	}
	d := base
	for i := 0; i < attempt && d < maxDelay; i++ {
		if d > maxDelay/2 {
			// Doubling would pass the cap, or overflow when the cap is
			// near the largest Duration: saturate instead.
			return maxDelay
		}
		d *= 2
	}
	return min(d, maxDelay)
}
