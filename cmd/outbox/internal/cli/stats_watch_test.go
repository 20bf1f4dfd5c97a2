package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

func TestStatsViewRedrawsInPlaceOnATerminal(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	v := &statsView{w: &buf, interval: 2 * time.Second, tty: true}
	at := time.Date(2025, 1, 31, 9, 0, 0, 0, time.UTC)
	require.NoError(t, v.show(at, outbox.Stats{Pending: 3}, outbox.Flow{}, outbox.TableHealth{}))
	first := buf.String()
	require.True(t, strings.HasPrefix(first, "outbox stats, every 2s, at 09:00:00 (Ctrl-C to stop)\n\n"), first)
	require.Regexp(t, `(?m)^pending +3$`, first)
	require.Regexp(t, `(?m)^published +-$`, first, "no rate before a second sample")
	require.NotContains(t, first, "\033[")

	buf.Reset()
	// The tables' health refreshes with the counts.
	dead := int64(42)
	health := outbox.TableHealth{Tables: []outbox.TableStorage{{Table: "outbox_events", DeadTuples: &dead}},
		Horizon: &outbox.VacuumHorizon{Age: 90 * time.Second}}
	require.NoError(t, v.show(at.Add(2*time.Second), outbox.Stats{Pending: 1},
		outbox.Flow{Interval: 2 * time.Second, Written: 4, Published: 6}, health))
	second := buf.String()
	// Back up over the 9 lines drawn before, clear them, draw again.
	require.True(t, strings.HasPrefix(second, "\033[9A\r\033[J"), "%q", second)
	require.Regexp(t, `(?m)^pending +1$`, second)
	require.Regexp(t, `(?m)^written +2\.0/s$`, second)
	require.Regexp(t, `(?m)^published +3\.0/s$`, second)
	require.Regexp(t, `(?m)^outbox_events +42 dead tuples$`, second)
	require.Regexp(t, `(?m)^vacuum horizon +`, second)
	require.Equal(t, 11, strings.Count(second, "\n"))

	buf.Reset()
	require.NoError(t, v.show(at.Add(4*time.Second), outbox.Stats{}, outbox.Flow{}, outbox.TableHealth{}))
	require.True(t, strings.HasPrefix(buf.String(), "\033[11A\r\033[J"), "%q", buf.String())
}

func TestStatsViewPrintsBlocksOffATerminal(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	v := &statsView{w: &buf, interval: time.Second}
	at := time.Date(2025, 1, 31, 9, 0, 0, 0, time.UTC)
	require.NoError(t, v.show(at, outbox.Stats{Failed: 2}, outbox.Flow{}, outbox.TableHealth{}))
	require.NoError(t, v.show(at.Add(time.Second), outbox.Stats{Failed: 1}, outbox.Flow{Interval: time.Second, Written: 5, Published: 5}, outbox.TableHealth{}))
	out := buf.String()
	require.NotContains(t, out, "\033")
	blocks := strings.Split(strings.TrimSuffix(out, "\n\n"), "\n\n")
	require.Len(t, blocks, 2)
	require.True(t, strings.HasPrefix(blocks[0], "# 2025-01-31T09:00:00Z\n"), blocks[0])
	require.True(t, strings.HasPrefix(blocks[1], "# 2025-01-31T09:00:01Z\n"), blocks[1])
	require.Regexp(t, `(?m)^failed +1$`, blocks[1])
	require.Regexp(t, `(?m)^published +5\.0/s$`, blocks[1])
}

func TestStatsViewJSONLines(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	v := &statsView{w: &buf, interval: time.Second, json: true}
	at := time.Date(2025, 1, 31, 9, 0, 0, 0, time.UTC)
	require.NoError(t, v.show(at, outbox.Stats{Pending: 1, OldestPendingAge: 1500 * time.Millisecond}, outbox.Flow{}, outbox.TableHealth{}))
	dead := int64(7)
	require.NoError(t, v.show(at.Add(time.Second), outbox.Stats{}, outbox.Flow{Interval: 2 * time.Second, Written: 3, Published: 4},
		outbox.TableHealth{Tables: []outbox.TableStorage{{Table: "outbox_events", DeadTuples: &dead}}}))
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 2)
	require.JSONEq(t, `{"at":"2025-01-31T09:00:00Z","pending":1,"processing":0,"processed":0,"failed":0,
		"oldest_pending_age_seconds":1.5,"dead_letter_retry_waiting":0,"dead_letter_retry_next_due":null,"written_per_second":null,"published_per_second":null,
		"tables":[],"vacuum_horizon":null,"innodb_history_length":null,"sqlite_file":null}`, lines[0])
	require.Contains(t, lines[1], `"tables":[{"table":"outbox_events","live_rows":null,"dead_tuples":7,`)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &doc))
	require.InDelta(t, 1.5, doc["written_per_second"], 1e-9)
	require.InDelta(t, 2.0, doc["published_per_second"], 1e-9)
}

func TestProgressShowsETAWithATotal(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	// As newProgress makes it for a terminal, started two seconds ago.
	p := &progress{w: &buf, verb: "replayed", start: time.Now().Add(-2 * time.Second)}
	p.setTotal(5000)
	p.update(1000) // 500/s: 4000 left take 8s
	require.Regexp(t, `^\r\x1b\[Kreplayed 1000 of 5000 events \(\d+/s, ETA [78]s\)$`, buf.String())
}
