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

// rssSampler records the highest VmRSS of this process while it runs, and
// the machine's busy CPU time from its start to Stop.
type rssSampler struct {
	peak atomic.Int64
	stop chan struct{}
	wg   sync.WaitGroup
	// cpu0 is the machine's CPU times at the start; cpuOK is false
	// without /proc/stat. busy is set by Stop.
	cpu0  machineCPU
	cpuOK bool
	busy  float64
}

// rssInterval is how often the sampler reads /proc/self/status.
const rssInterval = 50 * time.Millisecond

func startRSS() *rssSampler {
	s := &rssSampler{stop: make(chan struct{})}
	s.cpu0, s.cpuOK = readMachineCPU()
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
	if cpu1, ok := readMachineCPU(); ok && s.cpuOK {
		s.busy = cpu1.busySince(s.cpu0)
	}
	close(s.stop)
	s.wg.Wait()
	s.sample()
	return s.peak.Load()
}

// stopInto is Stop, setting rep's RSSPeakBytes and MachineCPUBusyS.
func (s *rssSampler) stopInto(rep *Report) {
	rep.RSSPeakBytes = s.Stop()
	rep.MachineCPUBusyS = s.busy
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

// userHZ is the unit of /proc/stat's CPU times (USER_HZ, clock ticks per
// second): 100 on every Linux architecture Go supports.
const userHZ = 100

// machineCPU is the "cpu" line of /proc/stat: the whole machine's CPU
// time, all cores and all processes, in ticks since boot.
type machineCPU struct {
	busy, idle int64
	// cores is the number of "cpuN" lines: the machine's online cores.
	cores int
}

// busySince is the busy CPU seconds, summed over all cores, between
// earlier and c.
func (c machineCPU) busySince(earlier machineCPU) float64 {
	return float64(c.busy-earlier.busy) / userHZ
}

// readMachineCPU reads /proc/stat; ok is false where it is missing or not
// understood.
func readMachineCPU() (machineCPU, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}, false
	}
	return parseProcStat(b)
}

// parseProcStat parses /proc/stat's "cpu" line (user nice system idle
// iowait irq softirq steal …): busy is user+nice+system+irq+softirq+steal
// (guest time is counted in user already), idle is idle+iowait.
func parseProcStat(stat []byte) (machineCPU, bool) {
	var c machineCPU
	found := false
	sc := bufio.NewScanner(bytes.NewReader(stat))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024) // the intr line is long
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("cpu")) {
			continue
		}
		f := bytes.Fields(line)
		if string(f[0]) != "cpu" {
			if _, err := strconv.Atoi(string(f[0][len("cpu"):])); err == nil {
				c.cores++
			}
			continue
		}
		if len(f) < 9 {
			return machineCPU{}, false
		}
		var v [8]int64
		for i := range v {
			n, err := strconv.ParseInt(string(f[i+1]), 10, 64)
			if err != nil {
				return machineCPU{}, false
			}
			v[i] = n
		}
		c.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
		c.idle = v[3] + v[4]
		found = true
	}
	return c, found && c.cores > 0
}

// machineCores is the machine's online cores as /proc/stat counts them,
// or 0 without it.
func machineCores() int {
	c, ok := readMachineCPU()
	if !ok {
		return 0
	}
	return c.cores
}
