package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// tableSize reads the outbox table's storage and tuple counts. Call it after
// the scenario's pools are closed: a backend flushes its statistics when it
// exits, so the dead-tuple count then includes all of the scenario's work.
func (r *Runner) tableSize(ctx context.Context, s scratch) (TableSize, error) {
	if err := r.flushOwnStats(ctx); err != nil {
		return TableSize{}, err
	}
	var ts TableSize
	// Each reading is its own transaction, so it sees fresh statistics
	// (stats_fetch_consistency caches them per transaction).
	err := r.ctl.QueryRow(ctx, `SELECT pg_total_relation_size(t.oid), pg_indexes_size(t.oid),
    coalesce(st.n_live_tup, 0), coalesce(st.n_dead_tup, 0), pg_total_relation_size(a.oid)
FROM (SELECT $1::regclass::oid AS oid) t
CROSS JOIN (SELECT $2::regclass::oid AS oid) a
LEFT JOIN pg_stat_user_tables st ON st.relid = t.oid`, s.table, s.archive).
		Scan(&ts.TotalBytes, &ts.IndexBytes, &ts.LiveTuples, &ts.DeadTuples, &ts.ArchiveTotalBytes)
	if err != nil {
		return TableSize{}, fmt.Errorf("read table size: %w", err)
	}
	return ts, nil
}

// flushOwnStats makes the control connection publish its pending table
// statistics now instead of within the next ten seconds.
func (r *Runner) flushOwnStats(ctx context.Context) error {
	if !r.flushStats {
		return nil
	}
	if _, err := r.ctl.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		return fmt.Errorf("flush statistics: %w", err)
	}
	return nil
}

// backlog counts undelivered events: pending or processing.
func (r *Runner) backlog(ctx context.Context, s scratch) (int64, error) {
	var n int64
	// Literal statuses: each count reads its partial index.
	err := r.ctl.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+s.table+` WHERE status = 'pending')
    + (SELECT count(*) FROM `+s.table+` WHERE status = 'processing')`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count backlog: %w", err)
	}
	return n, nil
}

// vacuumAnalyze leaves a freshly filled table as autovacuum eventually
// would: visibility map set, statistics current.
func (r *Runner) vacuumAnalyze(ctx context.Context, s scratch) error {
	if _, err := r.ctl.Exec(ctx, `VACUUM ANALYZE `+s.table); err != nil {
		return fmt.Errorf("vacuum analyze: %w", err)
	}
	return nil
}

// rssSampler records the highest VmRSS of this process while it runs.
type rssSampler struct {
	peak atomic.Int64
	stop chan struct{}
	wg   sync.WaitGroup
}

// rssInterval is how often the sampler reads /proc/self/status.
const rssInterval = 50 * time.Millisecond

func startRSS() *rssSampler {
	s := &rssSampler{stop: make(chan struct{})}
	s.sample()
	s.wg.Go(func() {
		t := time.NewTicker(rssInterval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	})
	return s
}

func (s *rssSampler) sample() {
	if v := readRSS(); v > s.peak.Load() {
		s.peak.Store(v)
	}
}

// Stop ends sampling and returns the peak in bytes (0 without /proc).
func (s *rssSampler) Stop() int64 {
	close(s.stop)
	s.wg.Wait()
	s.sample()
	return s.peak.Load()
}

// readRSS returns this process's VmRSS in bytes, or 0 when unknown.
func readRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	return parseVmRSS(b)
}

// parseVmRSS finds "VmRSS:  123 kB" in a /proc/<pid>/status file.
func parseVmRSS(status []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0
		}
		return kb * 1024
	}
	return 0
}
