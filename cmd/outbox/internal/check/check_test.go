package check

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/internal/faultproxy"
)

// The end-to-end tests, which run the built binary against real databases,
// are in cmd/outbox/check_test.go.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOutOfOrderCountsInversionsPerAggregate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		first []delivery
		want  int
	}{
		{"in order", []delivery{{1, "a", 1}, {2, "b", 1}, {3, "a", 2}, {4, "b", 2}}, 0},
		{"interleaved aggregates are not out of order", []delivery{{2, "b", 1}, {1, "a", 1}, {4, "b", 2}, {3, "a", 2}}, 0},
		{"one late", []delivery{{2, "a", 2}, {3, "a", 3}, {1, "a", 1}}, 1},
		{"reversed", []delivery{{3, "a", 3}, {2, "a", 2}, {1, "a", 1}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, outOfOrder(tc.first))
		})
	}
}

func TestScheduleDrawsEveryFaultWithinTheDuration(t *testing.T) {
	t.Parallel()
	r := &run{cfg: Config{Duration: 10 * time.Second, Kills: 7, Cuts: 5, Relays: 3}, rng: rand.New(rand.NewPCG(1, 2))}
	kills, cuts := r.schedule()
	require.Len(t, kills, 7)
	require.Empty(t, cuts, "no proxy, no network faults")

	r.cfg.Kills = -1
	r.proxy = nil
	kills, _ = r.schedule()
	require.Empty(t, kills, "negative means none")

	r = &run{cfg: Config{Duration: 10 * time.Second, Kills: 4, Cuts: 6, Relays: 2}, rng: rand.New(rand.NewPCG(3, 4))}
	r.proxy = newTestProxy(t)
	kills, cuts = r.schedule()
	require.Len(t, kills, 4)
	require.Len(t, cuts, 6)
	kinds := map[faultKind]int{}
	for _, fs := range [][]fault{kills, cuts} {
		require.True(t, slices.IsSortedFunc(fs, func(a, b fault) int { return int(a.at - b.at) }))
		for _, f := range fs {
			require.GreaterOrEqual(t, f.at, r.cfg.Duration/20)
			require.Less(t, f.at, r.cfg.Duration*9/10)
			require.Less(t, f.slot, 2)
			kinds[f.kind]++
			if f.kind == faultBlackhole || f.kind == faultRefuse {
				require.Greater(t, f.hold, relayDBTimeout, "a hold outlasts the relays' database timeout")
			}
		}
	}
	require.Equal(t, map[faultKind]int{faultKill: 4, faultReset: 2, faultBlackhole: 2, faultRefuse: 2}, kinds)
}

func TestRelayURLPointsAtTheProxy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ raw, want string }{
		{"postgres://u:p%40ss@db.internal:5432/app?sslmode=require", "postgres://u:p%40ss@127.0.0.1:9999/app?sslmode=require"},
		{"host=db.internal port=5432 dbname=app", "host=db.internal port=5432 dbname=app host=127.0.0.1 port=9999"},
	} {
		got, err := (&pgScratch{raw: tc.raw}).relayURL("127.0.0.1:9999")
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
	got, err := (&sqlScratch{raw: "mysql://root@db:3306/app", mysql: true}).relayURL("127.0.0.1:9999")
	require.NoError(t, err)
	require.Equal(t, "mysql://root@127.0.0.1:9999/app", got)
	got, err = (&pgScratch{raw: "postgres://db/app"}).relayURL("")
	require.NoError(t, err)
	require.Equal(t, "postgres://db/app", got, "no proxy, the URL as given")
}

func TestTailKeepsTheLastLines(t *testing.T) {
	t.Parallel()
	var tl tail
	require.Empty(t, tl.last())
	_, _ = tl.Write([]byte("one\ntw"))
	require.Equal(t, "one", tl.last())
	_, _ = tl.Write([]byte("o\n\nthree"))
	require.Equal(t, "two", tl.last())
	for i := range 10 {
		_, _ = tl.Write([]byte{'a' + byte(i), '\n'})
	}
	require.Len(t, tl.lines, tailLines)
	require.Equal(t, "j", tl.last())
}

func TestEnvironReplacesTheCheckVariables(t *testing.T) {
	t.Parallel()
	env := environ([]string{"PATH=/bin", "OUTBOX_DATABASE_URL=postgres://mine", envTestDrop + "=3", "OUTBOX_WEBHOOK_SECRET=s"},
		map[string]string{"OUTBOX_DATABASE_URL": "postgres://proxied", "OUTBOX_SINK": "http://127.0.0.1:1/events"})
	require.ElementsMatch(t, []string{"PATH=/bin", "OUTBOX_WEBHOOK_SECRET=s",
		"OUTBOX_DATABASE_URL=postgres://proxied", "OUTBOX_SINK=http://127.0.0.1:1/events"}, env,
		"the relays never see the test hook, and get the check's database and sink")
}

// newTestProxy is a fault proxy to nowhere in particular: schedule only
// asks whether there is one.
func newTestProxy(t *testing.T) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Listen(context.Background(), "127.0.0.1:1")
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}
