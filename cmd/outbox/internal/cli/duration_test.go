package cli

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"7d", 7 * 24 * time.Hour},
		{"1.5d", 36 * time.Hour},
		{"36h", 36 * time.Hour},
		{"90m", 90 * time.Minute},
		{"1d12h", 36 * time.Hour},
		{"2d30m", 48*time.Hour + 30*time.Minute},
		{"1h30m", 90 * time.Minute},
		{"500ms", 500 * time.Millisecond},
		{"0d", 0},
		{"-1d", -24 * time.Hour},
		{" 7d ", 7 * 24 * time.Hour},
	}
	for _, tt := range tests {
		got, err := parseDuration(tt.in)
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got, tt.in)
	}
	for _, bad := range []string{"", "d", "7", "7x", "d7", "1..5d", "7dd", "7 d", "1e3d", "99999999999d", "h"} {
		_, err := parseDuration(bad)
		require.Error(t, err, "%q", bad)
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"7d", "1.5d", "36h", "1d12h", "-2d", "90m", "d", "7dd", "1..5d", "+.5d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDuration(s)
		if err != nil {
			return
		}
		// Without a day term the result is exactly time.ParseDuration's.
		if want, err := time.ParseDuration(s); err == nil && d != want {
			t.Fatalf("parseDuration(%q) = %v, time.ParseDuration = %v", s, d, want)
		}
	})
}
