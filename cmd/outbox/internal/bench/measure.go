package bench

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

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
