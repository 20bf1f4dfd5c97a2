package backoff

import (
	"testing"
	"time"
)

func TestExponential(t *testing.T) {
	t.Parallel()
	cases := []struct {
		attempt int
		want    time.Duration
	}{
		{0, time.Second}, {1, 2 * time.Second}, {2, 4 * time.Second}, {5, 32 * time.Second},
		{8, 256 * time.Second}, {9, 5 * time.Minute}, {62, 5 * time.Minute}, {1000, 5 * time.Minute},
	}
	for _, c := range cases {
		if got := Uncapped(c.attempt, time.Second, 5*time.Minute); got != c.want {
			t.Errorf("Uncapped(%d) = %v, want %v", c.attempt, got, c.want)
		}
		for range 100 {
			got := Exponential(c.attempt, time.Second, 5*time.Minute)
			low := time.Duration(float64(c.want) * (1 - Jitter))
			if got < low || got > c.want {
				t.Fatalf("Exponential(%d) = %v, want within [%v, %v]", c.attempt, got, low, c.want)
			}
		}
	}
}
