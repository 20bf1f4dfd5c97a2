package check

import (
	"context"
	"slices"
	"time"
)

// faultKind is one fault the check injects.
type faultKind int

const (
	faultKill      faultKind = iota // SIGKILL a relay; its slot restarts it
	faultReset                      // close every proxied connection
	faultRefuse                     // refuse connections for a while: the database looks down
	faultBlackhole                  // connections stay open and silent for a while: a partition
)

// fault is a fault at a moment of the run.
type fault struct {
	at   time.Duration // since the start of the faults
	kind faultKind
	// hold is how long a refusal or a blackhole lasts.
	hold time.Duration
	slot int // the relay a kill kills
}

// schedule draws the run's faults: Kills relay kills and Cuts network
// faults (resets, blackholes and refusals in turn) at random moments
// within the first nine tenths of Duration, each list in order. The two
// run side by side; a network fault that holds (a refusal, a blackhole)
// delays the next one, so every fault happens even if the last ends after
// Duration.
func (r *run) schedule() (kills, cuts []fault) {
	d := r.cfg.Duration
	at := func() time.Duration { return d/20 + time.Duration(r.rng.Int64N(int64(max(d*17/20, 1)))) }
	for range max(r.cfg.Kills, 0) {
		kills = append(kills, fault{at: at(), kind: faultKill, slot: r.rng.IntN(r.cfg.Relays)})
	}
	if r.proxy != nil {
		for i := range max(r.cfg.Cuts, 0) {
			f := fault{at: at(), kind: []faultKind{faultReset, faultBlackhole, faultRefuse}[i%3]}
			if f.kind != faultReset {
				// Longer than the relays' database timeout, so they see it.
				f.hold = relayDBTimeout + time.Duration(r.rng.Int64N(int64(relayLease)))
			}
			cuts = append(cuts, f)
		}
	}
	byTime := func(a, b fault) int { return int(a.at - b.at) }
	slices.SortFunc(kills, byTime)
	slices.SortFunc(cuts, byTime)
	return kills, cuts
}

// inject runs the schedule until ctx ends. A refusal or a blackhole lasts
// its hold (or until ctx ends) before the next fault.
func (r *run) inject(ctx context.Context, schedule []fault) {
	for _, f := range schedule {
		if !sleep(ctx, time.Until(r.faultsStart.Add(f.at))) {
			return
		}
		switch f.kind {
		case faultKill:
			r.killOne(ctx, f.slot)
		case faultReset:
			r.proxy.Cut()
			r.count(func(rep *Report) { rep.Resets++ })
		case faultRefuse:
			r.proxy.Refuse()
			r.count(func(rep *Report) { rep.Refusals++ })
			sleep(ctx, f.hold)
			r.proxy.Allow()
		case faultBlackhole:
			r.proxy.Blackhole()
			r.count(func(rep *Report) { rep.Blackholes++ })
			sleep(ctx, f.hold)
			r.proxy.Heal()
		}
		r.cfg.Logger.Debug("check: fault injected", "kind", int(f.kind), "hold", f.hold)
	}
}

// killOne SIGKILLs the relay of slot, or of the next slot that has one
// running; when none runs (all are restarting), it retries shortly.
func (r *run) killOne(ctx context.Context, slot int) {
	for {
		for i := range r.cfg.Relays {
			if r.fleet.kill((slot + i) % r.cfg.Relays) {
				return
			}
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return
		}
	}
}

// count updates the report under the run's lock.
func (r *run) count(update func(*Report)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	update(r.report)
}

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
