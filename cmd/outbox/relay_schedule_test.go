package main_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
)

func TestRelayScheduleFlagErrors(t *testing.T) {
	t.Parallel()
	relay := []string{"--database-url", testutil.DatabaseURL(), "relay", "--sink", "stdout:"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad purge-after", []string{"--purge-after", "soon"}, `invalid argument "soon" for "--purge-after" flag: use a duration such as 7d, 36h or 90m (0 for off)`},
		{"negative purge-after", []string{"--purge-after", "-1d"}, `invalid argument "-1d" for "--purge-after" flag`},
		{"bad purge-failed-after", []string{"--purge-failed-after", "7 days"}, `invalid argument "7 days" for "--purge-failed-after" flag`},
		{"bad dead-letter-retry", []string{"--dead-letter-retry", "hourly"}, `invalid argument "hourly" for "--dead-letter-retry" flag`},
		{"zero purge-interval", []string{"--purge-after", "7d", "--purge-interval", "0"}, "invalid --purge-interval 0: use a positive value"},
		{"zero dead-letter-retries", []string{"--dead-letter-retry", "1h", "--dead-letter-retries", "0"}, "invalid --dead-letter-retries 0: use a positive value"},
		{"bad dead-letter-retries", []string{"--dead-letter-retries", "many"}, `invalid argument "many" for "--dead-letter-retries" flag`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, nil, append(append([]string{}, relay...), tt.args...)...)
			requireFail(t, res, 2, tt.want)
			require.Empty(t, res.stdout)
		})
	}
}
