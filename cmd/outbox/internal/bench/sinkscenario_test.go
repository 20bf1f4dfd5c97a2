package bench_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cmd/outbox/internal/bench"
	"github.com/outboxkit/outbox/sink/redissink"
)

// countingSink counts the events and the Publish calls it gets.
type countingSink struct {
	events, calls, biggest atomic.Int64
}

func (s *countingSink) Publish(_ context.Context, events []outbox.Event) []error {
	s.events.Add(int64(len(events)))
	s.calls.Add(1)
	for {
		b := s.biggest.Load()
		if int64(len(events)) <= b || s.biggest.CompareAndSwap(b, int64(len(events))) {
			return nil
		}
	}
}

// The sink scenario publishes every event once, batch by batch, with no
// database, and is reported without a retention mode or table.
func TestSinkScenario(t *testing.T) {
	t.Parallel()
	sink := &countingSink{}
	b := setup(t, postgres, bench.Config{Events: 550, BatchSize: 100, Sink: sink})
	res, err := b.runner.Run(b.ctx, []bench.Scenario{bench.ScenarioSink})
	require.NoError(t, err)
	require.Len(t, res.Scenarios, 1)
	rep := res.Scenarios[0]
	require.Equal(t, bench.ScenarioSink, rep.Scenario)
	require.EqualValues(t, 550, rep.Events)
	require.Zero(t, rep.Duplicates)
	require.InDelta(t, float64(rep.Events)/rep.Seconds, rep.EventsPerS, 1e-6)
	require.Empty(t, rep.Schema, "no scratch space")
	require.Empty(t, rep.Retention)
	require.Nil(t, rep.DrainStats)
	require.EqualValues(t, 550, sink.events.Load())
	require.EqualValues(t, 6, sink.calls.Load(), "one Publish per batch: 5 of 100 and one of 50")
	require.EqualValues(t, 100, sink.biggest.Load())
	require.Empty(t, b.scratches(t))
}

// With the discard sink, sink measures the harness and drain has no limit.
func TestSinkDiscardHasNoLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, postgres, bench.Config{Events: 300})
	res, err := b.runner.Run(b.ctx, []bench.Scenario{bench.ScenarioDrain, bench.ScenarioSink})
	require.NoError(t, err)
	require.Len(t, res.Scenarios, 2)
	require.Equal(t, bench.ScenarioSink, res.Scenarios[0].Scenario)
	require.Positive(t, res.Scenarios[0].EventsPerS)
	drain := res.Scenarios[1]
	require.Equal(t, bench.ScenarioDrain, drain.Scenario)
	require.Empty(t, drain.Sink)
	require.Zero(t, drain.LimitEventsPerS)
	require.Zero(t, drain.RatioToLimit)
}

// redisURL is the test Redis server (TEST_REDIS_URL).
func redisURL() string {
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// redisDel deletes key with one inline command, so the test needs no
// client of its own.
func redisDel(t *testing.T, key string) {
	t.Helper()
	u, err := url.Parse(redisURL())
	require.NoError(t, err)
	if u.User != nil {
		t.Logf("not deleting %s: the test server needs a password", key)
		return
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	db := "0"
	if len(u.Path) > 1 {
		db = u.Path[1:]
	}
	_, err = fmt.Fprintf(conn, "SELECT %s\r\nDEL %s\r\n", db, key)
	require.NoError(t, err)
	r := bufio.NewReader(conn)
	for range 2 {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		require.NotEqual(t, byte('-'), line[0], "redis: %s", line)
	}
}

// With a real broker, drain and sink together run a discard drain too, and
// the drain reports the limit (the slower of the discard drain and the
// sink) and its ratio to it.
func TestDrainLimitWithRedis(t *testing.T) {
	t.Parallel()
	var r [4]byte
	_, _ = rand.Read(r[:])
	stream := "outbox-bench-test-" + hex.EncodeToString(r[:])
	t.Cleanup(func() { redisDel(t, stream) })
	cfg, err := redissink.ConfigFromURL(redisURL() + "?maxlen=1000&route=" + stream)
	require.NoError(t, err)
	sink, err := redissink.New(context.Background(), cfg)
	require.NoError(t, err, "Redis is not reachable at TEST_REDIS_URL (default redis://127.0.0.1:6379/0): start redis-server")
	t.Cleanup(func() { require.NoError(t, sink.Close()) })

	b := setup(t, postgres, bench.Config{Events: 400, Sink: sink, SinkName: "redis:"})
	res, err := b.runner.Run(b.ctx, []bench.Scenario{bench.ScenarioDrain, bench.ScenarioSink})
	require.NoError(t, err)
	require.Equal(t, "redis:", res.Settings.Sink)
	require.Len(t, res.Scenarios, 3)
	sinkRep, discard, drain := res.Scenarios[0], res.Scenarios[1], res.Scenarios[2]
	require.Equal(t, bench.ScenarioSink, sinkRep.Scenario)
	require.Equal(t, bench.ScenarioDrain, discard.Scenario)
	require.Equal(t, "discard:", discard.Sink, "the discard drain says so")
	require.Zero(t, discard.LimitEventsPerS)
	require.Equal(t, bench.ScenarioDrain, drain.Scenario)
	require.Empty(t, drain.Sink, "the drain used settings.sink")
	for _, rep := range res.Scenarios {
		require.EqualValues(t, 400, rep.Events)
		require.Zero(t, rep.Duplicates)
		require.Positive(t, rep.EventsPerS)
	}
	require.NotNil(t, drain.DrainStats)
	require.Equal(t, sinkRep.EventsPerS, drain.SinkEventsPerS)
	require.Equal(t, discard.EventsPerS, drain.DiscardDrainEventsPerS)
	require.Equal(t, min(sinkRep.EventsPerS, discard.EventsPerS), drain.LimitEventsPerS)
	require.InDelta(t, drain.EventsPerS/drain.LimitEventsPerS, drain.RatioToLimit, 1e-9)

	// The machine's CPU per event, and the CPU limit from the discard
	// drain's and the sink's: computed, whatever the numbers are (a run
	// this short may see no busy tick, and then reports no limit).
	require.Positive(t, res.MachineCPUs, "this test runs on Linux")
	for _, rep := range res.Scenarios {
		require.GreaterOrEqual(t, rep.MachineCPUBusyS, 0.0)
		require.InDelta(t, rep.MachineCPUBusyS/float64(rep.Events), rep.MachineCPUSPerEvent, 1e-15)
	}
	require.Equal(t, discard.MachineCPUSPerEvent, drain.DiscardDrainCPUSPerEvent)
	require.Equal(t, sinkRep.MachineCPUSPerEvent, drain.SinkCPUSPerEvent)
	require.Zero(t, discard.CPULimitEventsPerS)
	if discard.MachineCPUSPerEvent > 0 && sinkRep.MachineCPUSPerEvent > 0 {
		want := float64(res.MachineCPUs) / (discard.MachineCPUSPerEvent + sinkRep.MachineCPUSPerEvent)
		require.InDelta(t, want, drain.CPULimitEventsPerS, want*1e-9)
		require.InDelta(t, drain.EventsPerS/want, drain.RatioToCPULimit, 1e-9)
	} else {
		require.Zero(t, drain.CPULimitEventsPerS)
		require.Zero(t, drain.RatioToCPULimit)
	}
	require.Empty(t, b.scratches(t))
}

// reference-minimal drains its own minimal table with durable commits.
func TestReferenceMinimal(t *testing.T) {
	t.Parallel()
	sink := &countingSink{}
	b := setup(t, postgres, bench.Config{Events: 500, BatchSize: 100, Sink: sink})
	res, err := b.runner.Run(b.ctx, []bench.Scenario{bench.ScenarioReferenceMinimal})
	require.NoError(t, err)
	require.Len(t, res.Scenarios, 1)
	rep := res.Scenarios[0]
	require.Equal(t, bench.ScenarioReferenceMinimal, rep.Scenario)
	require.Equal(t, "processed", rep.Retention)
	require.EqualValues(t, 500, rep.Events)
	require.EqualValues(t, 500, sink.events.Load())
	require.Zero(t, rep.Duplicates)
	require.Positive(t, rep.EventsPerS)
	require.Nil(t, rep.DrainStats)
	// The readings are of the minimal table: its primary key and one
	// partial index, the rows updated twice each.
	require.EqualValues(t, 500, *rep.Table.Before.LiveTuples)
	require.Positive(t, *rep.Table.Before.IndexBytes)
	require.Greater(t, rep.Table.After.TotalBytes, rep.Table.Before.TotalBytes)
	require.Positive(t, *rep.Table.After.DeadTuples)
	require.Empty(t, b.scratches(t))
}

// Elsewhere than PostgreSQL, reference-minimal refuses to run, and Run
// leaves it out with a note.
func TestReferenceMinimalNeedsPostgres(t *testing.T) {
	t.Parallel()
	b := setup(t, sqlite, bench.Config{Events: 10})
	_, err := b.runner.ReferenceMinimal(b.ctx)
	require.ErrorIs(t, err, bench.ErrMinimalNeedsPostgres)
	res, err := b.runner.Run(b.ctx, []bench.Scenario{bench.ScenarioReferenceMinimal})
	require.NoError(t, err)
	require.Empty(t, res.Scenarios)
	require.Contains(t, res.Notes, "reference-minimal did not run: it is PostgreSQL's, and this is SQLite.")
}
