package main_test

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

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

func TestStatsShowsDeadLetterRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.writeN(t, 3)
	for _, id := range ids {
		b.setFailed(t, id, "refused")
	}
	b.exec(t, `UPDATE {table} SET dead_letter_retry_at = timestamptz '2031-05-06 07:08:09.5Z' + (id - $1) * interval '1 hour' WHERE id = ANY($2)`, ids[0], ids[:2])

	res := outboxCmd(t, b.schema, "stats")
	requireOK(t, res)
	require.Regexp(t, `(?m)^dead-letter retry +2 waiting, next due 2031-05-06T07:08:09Z$`, res.stdout)

	res = outboxCmd(t, b.schema, "stats", "--json")
	requireOK(t, res)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	require.Equal(t, 2.0, doc["dead_letter_retry_waiting"])
	require.Equal(t, "2031-05-06T07:08:09.5Z", doc["dead_letter_retry_next_due"])
	require.Equal(t, 3.0, doc["failed"])
}

// TestRelayPurgeAfterFlag runs the relay binary with --purge-after: the
// old processed events go, the young ones and the failed ones stay, and it
// logs the run at INFO.
func TestRelayPurgeAfterFlag(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.writeN(t, 5)
	for _, id := range ids[:4] {
		b.setProcessed(t, id)
	}
	b.setFailed(t, ids[4], "refused")
	b.exec(t, `UPDATE {table} SET processed_at = now() - interval '8 days', updated_at = now() - interval '8 days' WHERE id = ANY($1)`, []int64{ids[0], ids[1], ids[4]})

	p := start(t, nil, "--database-url", testutil.DatabaseURL(), "--schema", b.schema, "relay", "--sink", "stdout:",
		"--purge-after", "7d", "--purge-interval", "1h", "--relay-id", "purger")
	testutil.WaitFor(t, 20*time.Second, "a purge run logged", func() bool { return strings.Contains(p.stderr.String(), "scheduled purge done") })
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM))
	logs := p.stderr.String()
	require.Contains(t, logs, "gained the job lease")
	require.Regexp(t, `scheduled purge done.* processed=2`, logs)
	st := b.stats(t)
	require.EqualValues(t, 2, st.Processed)
	require.EqualValues(t, 1, st.Failed, "without --purge-failed-after failed events stay")
}

func TestRelayJobLeaseSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, testRelayJobLeaseSurvivesSIGKILL)
}

// testRelayJobLeaseSurvivesSIGKILL: of two relays with a scheduled purge one
// leads; killed, it cannot release the lease, and the other takes over once
// the lease expires by the database clock, and purges.
func testRelayJobLeaseSurvivesSIGKILL(t *testing.T, db []string) {
	b := setup(t)
	relayArgs := func(id string) []string {
		return append(append([]string{}, db...), "--schema", b.schema, "relay", "--sink", "stdout:", "--relay-id", id,
			"--purge-after", "7d", "--purge-interval", "200ms", "--schedule-lease", "2s", "--lease", "3s", "--sink-timeout", "1s")
	}
	relays := map[string]*process{"relay-a": start(t, nil, relayArgs("relay-a")...), "relay-b": start(t, nil, relayArgs("relay-b")...)}
	var leader string
	testutil.WaitFor(t, 20*time.Second, "a leader", func() bool {
		for id, p := range relays {
			require.False(t, p.exited(), "%s exited; stderr:\n%s", id, p.stderr.String())
			if strings.Contains(p.stderr.String(), "gained the job lease") {
				leader = id
				return true
			}
		}
		return false
	})
	follower := "relay-a"
	if leader == "relay-a" {
		follower = "relay-b"
	}
	require.NotContains(t, relays[follower].stderr.String(), "gained the job lease", "one leader")

	// Old processed events appear only now: the survivor purges them.
	ids := b.writeN(t, 3)
	for _, id := range ids {
		b.setProcessed(t, id)
	}
	require.NoError(t, relays[leader].cmd.Process.Signal(syscall.SIGKILL))
	<-relays[leader].done
	killed := time.Now()
	b.exec(t, `UPDATE {table} SET processed_at = now() - interval '8 days' WHERE id = ANY($1)`, ids)

	testutil.WaitFor(t, 20*time.Second, "the survivor takes over", func() bool {
		return strings.Contains(relays[follower].stderr.String(), "gained the job lease")
	})
	require.Greater(t, time.Since(killed), 500*time.Millisecond, "taken over on expiry: a killed relay releases nothing")
	testutil.WaitFor(t, 20*time.Second, "the survivor purges", func() bool { return b.stats(t).Processed == 0 })
	require.Equal(t, 0, relays[follower].stop(t, syscall.SIGTERM))
}
