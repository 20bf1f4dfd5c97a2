package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

// Delivery by owned partitions (docs/ordering.md): on a driver that
// implements driver.PartitionClaimer and a schema at migration 8, an
// ordered relay (and, with LeasesPartitions, an unordered one) owns
// partitions of keys under a lease per partition, reads their due events
// without writing them and writes each event once, when it settles it.
// The batch then goes through the same pipeline as a claimed one: its
// fence carries the partitions and their fences instead of a row lease,
// and a release writes nothing.

// Leases says how relays share the events between them.
type Leases string

// Lease modes.
const (
	// LeasesAuto gives an ordered relay owned partitions where the database
	// and schema have them (PostgreSQL, migration 8) and row leases
	// elsewhere; an unordered relay takes row leases. The default.
	LeasesAuto Leases = "auto"
	// LeasesRows claims every event under a lease of its own: the claim
	// writes it (status processing) and the settle writes it again. Any
	// relay takes any due event, so one slow batch holds back only itself.
	LeasesRows Leases = "rows"
	// LeasesPartitions makes the relay own partitions of keys, ordered or
	// not: it reads its partitions' due events without writing them and
	// writes each event once, when it settles it; about a fifth less
	// database work per event than row leases (docs/performance.md). While
	// a batch is in flight, its partitions are not read again: a slow
	// batch also holds back the events of its partitions written since.
	// Events in flight stay pending (outbox stats counts no processing
	// events). PostgreSQL with the schema at migration 8, without
	// EventTypes or CaptureSlot; Start refuses elsewhere. Every relay of a
	// schema must use the same leases.
	LeasesPartitions Leases = "partitions"
)

// ParseLeases returns the lease mode named s.
func ParseLeases(s string) (Leases, error) {
	switch l := Leases(s); l {
	case LeasesAuto, LeasesRows, LeasesPartitions:
		return l, nil
	}
	return "", &ConfigError{Field: "Leases", Err: fmt.Errorf("unknown mode %q: use auto, rows or partitions", s)}
}

// validateLeases checks the lease mode of a config with defaults.
func (c RelayConfig) validateLeases() error {
	if _, err := ParseLeases(string(c.Leases)); err != nil {
		return err
	}
	if c.Leases != LeasesPartitions {
		return nil
	}
	switch {
	case len(c.EventTypes) > 0:
		// A relay owns every event of its partitions: one serving some
		// types would leave the others of its partitions unsent.
		return &ConfigError{Field: "Leases", Err: fmt.Errorf("is partitions with EventTypes: a relay owns all the events of its partitions, so relays split by type would leave each other's events unsent; use LeasesRows with an event type filter")}
	case c.CaptureSlot != "":
		return &ConfigError{Field: "Leases", Err: fmt.Errorf("is partitions with CaptureSlot: the table path of a capture relay claims under row leases; use LeasesAuto or LeasesRows")}
	}
	return nil
}

// partitions is a relay's share of the partitions.
type partitions struct {
	pc driver.PartitionClaimer
	// round serializes reads and balance rounds, so that a partition is
	// never released while a read takes events from it, and a read's
	// partitions are marked busy before the next read.
	round sync.Mutex

	mu sync.Mutex
	// busy maps each partition with a batch in flight to that batch's
	// publish deadline (this process's clock): it is not read again until
	// the batch settled, and not renewed once the deadline passed.
	busy   map[int32]time.Time
	offset int
	// first is a partition to read alone next, once it has no batch in
	// flight (readFirst); -1 for none.
	first  int32
	held   int
	relays int
	// perPart is the most events a rotated read of a full batch takes from
	// one partition (adaptPerPart); capped are the partitions in busy
	// whose read took that many (they may hold more).
	perPart int
	capped  map[int32]bool
	// inFlight: the schema records what is in flight on each partition
	// (driver.InFlightVersion), so a takeover counts an attempt of what
	// its owner had in flight when its lease ran out.
	inFlight bool
	// started: the first round ran. startRescue is what it rescued, left
	// for the balance loop to settle: the hooks do not run inside Start.
	started     bool
	startRescue driver.RescueResult
}

// balanceInterval is how often an ordered relay renews, sheds and takes
// partitions: a quarter lease, so that a partition it holds has more than
// half its lease left whenever it is read.
func (r *Relay) balanceInterval() time.Duration { return max(r.cfg.Lease/4, 10*time.Millisecond) }

// startPartitions switches the relay to owned partitions, when it is
// ordered (LeasesAuto) and the driver and schema support them, or when
// LeasesPartitions asks for them (refusing a driver or schema without
// them). takePartitions then takes its first share.
func (r *Relay) startPartitions(schemaVersion func() (int, error)) error {
	r.parts = nil
	asked := r.cfg.Leases == LeasesPartitions
	if !asked && (r.cfg.Leases != LeasesAuto || !r.ordered()) {
		return nil // (Validate refuses ordering with a capture slot)
	}
	pc, ok := r.drv.(driver.PartitionClaimer)
	if !ok {
		if asked {
			return fmt.Errorf("outbox: relay: leases %q are not supported by this database driver (PostgreSQL only); use leases auto or rows", LeasesPartitions)
		}
		return nil
	}
	version, err := schemaVersion()
	if err != nil {
		return fmt.Errorf("outbox: relay: read the schema version: %w", err)
	}
	if version < driver.PartitionedVersion {
		if asked {
			return fmt.Errorf("outbox: relay: leases %q need schema version %d, schema %q is at %d: run outbox migrate",
				LeasesPartitions, driver.PartitionedVersion, r.cfg.Schema, version)
		}
		return nil
	}
	r.parts = &partitions{pc: pc, busy: map[int32]time.Time{}, capped: map[int32]bool{}, first: -1, inFlight: version >= driver.InFlightVersion}
	return nil
}

// checkSinkTimeout warns, at Start, when a relay on owned partitions was
// given a sink timeout that its batches may not have: a read takes only
// partitions with more than half a lease left, and the publish ends before
// what was left at the read, less leaseMargin (publishWithin). The default
// sink timeout is not warned about: it is within that bound at the default
// lease, and at most half a lease at shorter ones.
func (r *Relay) checkSinkTimeout() {
	bound := r.cfg.Lease/2 - leaseMargin(r.cfg.Lease)
	if r.parts == nil || !r.sinkTimeoutSet || r.cfg.SinkTimeout <= bound {
		return
	}
	r.log.Warn("the sink timeout is longer than a batch on owned partitions may publish: a publish still running then is cut and its events fail their attempt; lower the sink timeout or raise the lease",
		slog.Duration("sink_timeout", r.cfg.SinkTimeout), slog.Duration("publish_bound", bound), slog.Duration("lease", r.cfg.Lease))
}

// takePartitions runs a relay's first balance round, for Start, when it
// runs on owned partitions.
func (r *Relay) takePartitions(ctx context.Context) error {
	if r.parts == nil {
		return nil
	}
	rescued, err := r.balanceRound(ctx)
	r.parts.startRescue = rescued
	if err != nil {
		return fmt.Errorf("outbox: relay: take partitions: %w", err)
	}
	return nil
}

// balance runs one balance round, then settles what its takeovers rescued
// (hooks run outside the round, so a slow hook holds no read back).
func (r *Relay) balance(ctx context.Context) error {
	rescued, err := r.balanceRound(ctx)
	if err != nil {
		return err
	}
	// What the partitions' earlier owners had in flight when their lease
	// ran out, rescued as an expired row lease is: suspects from now on.
	r.settleRescue(ctx, rescued)
	return nil
}

func (r *Relay) balanceRound(ctx context.Context) (driver.RescueResult, error) {
	p := r.parts
	p.round.Lock()
	defer p.round.Unlock()
	now := time.Now()
	var busy, stuck []int32
	p.mu.Lock()
	for part, deadline := range p.busy {
		busy = append(busy, part)
		if !now.Before(deadline) {
			stuck = append(stuck, part)
		}
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	defer cancel()
	res, err := p.pc.BalancePartitions(ctx, driver.BalanceParams{RelayID: r.cfg.RelayID, Lease: r.cfg.Lease,
		Busy: busy, Stuck: stuck, RescueInFlight: p.inFlight, MaxAttempts: r.cfg.MaxAttempts, Restart: !p.started})
	if err != nil {
		return driver.RescueResult{}, err
	}
	p.started = true
	p.mu.Lock()
	changed := res.Held != p.held || res.Relays != p.relays
	p.held, p.relays = res.Held, res.Relays
	p.mu.Unlock()
	if changed {
		r.log.Info("partitions held", slog.Int("partitions", res.Held), slog.Int("relays", res.Relays),
			slog.Int("stuck", len(stuck)))
	}
	return res.Rescue, nil
}

// balanceLoop runs a balance round every balanceInterval until the relay
// stops.
func (r *Relay) balanceLoop(ctx context.Context) {
	r.settleRescue(ctx, r.parts.startRescue)
	for r.sleep(r.balanceInterval(), false) {
		if err := r.balance(ctx); err != nil && ctx.Err() == nil && !r.isStopping() {
			r.warnDB(r.log, "partition balance", err, r.balanceInterval())
		}
	}
}

// releasePartitions gives up the relay's partitions once it stopped, within
// DBTimeout of ctx (the settling context: a stop that gives up cancels it,
// and the partitions then expire after a lease).
func (r *Relay) releasePartitions(ctx context.Context) {
	if r.parts == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	defer cancel()
	if err := r.parts.pc.ReleasePartitions(rctx, r.cfg.RelayID); err != nil && ctx.Err() == nil {
		r.log.Warn("releasing the relay's partitions failed; other relays take them over once their lease ends",
			slog.String("error", err.Error()))
	}
}

// readPartitions reads a batch from the relay's partitions and marks them
// busy until the batch is settled (partitionsDone). While a suspect that
// went back waits (readFirst), its partition is read alone first.
func (r *Relay) readPartitions(ctx context.Context, size int) (driver.Claim, error) {
	p := r.parts
	p.round.Lock()
	defer p.round.Unlock()
	p.mu.Lock()
	busy := make([]int32, 0, len(p.busy))
	for part := range p.busy {
		busy = append(busy, part)
	}
	first := p.first
	_, held := p.busy[first]
	p.mu.Unlock()
	if first >= 0 && !held {
		others := make([]int32, 0, driver.Partitions-1)
		for part := range int32(driver.Partitions) {
			if part != first {
				others = append(others, part)
			}
		}
		claim, err := r.readFrom(ctx, size, others, 0, size)
		if err == nil && (len(claim.Events) == 0 || holdsSuspect(claim)) {
			// The suspect went, or nothing is left to read there. (Older
			// events of the partition going first, or a failed read, leave
			// it to be read alone again.)
			p.mu.Lock()
			if p.first == first {
				p.first = -1
			}
			p.mu.Unlock()
		}
		if err != nil || len(claim.Events) > 0 {
			return claim, err
		}
		// Nothing to read there (the suspect is gone, or the partition):
		// the rotation goes on.
	}
	adapt := size == r.cfg.BatchSize
	p.mu.Lock()
	offset := p.offset
	p.offset = (p.offset + 1) % driver.Partitions
	perPart := size
	if adapt {
		perPart = p.nextPerPart(size, r.cfg.MaxInFlight)
	}
	p.mu.Unlock()
	claim, err := r.readFrom(ctx, size, busy, offset, perPart)
	if err == nil && adapt {
		p.mu.Lock()
		p.adaptPerPart(claim, size, r.cfg.MaxInFlight)
		p.mu.Unlock()
	}
	return claim, err
}

// nextPerPart returns, and keeps, the most events the next rotated read
// of a full batch of size takes from one partition (p.mu held). A
// backlog's oldest events lie close together in the table, while the
// events of one partition are spread over all of it: a batch that takes a
// few of the oldest events of many partitions reads and marks far fewer
// pages than one that takes a single partition's. The floor lets a batch
// come from about a (2 × maxInFlight)th of the relay's partitions, so that
// maxInFlight batches in flight leave half of them to read.
// With no partitions held (yet) there is no limit, and none is kept.
func (p *partitions) nextPerPart(size, maxInFlight int) int {
	if p.held <= 0 {
		return size
	}
	floor := min(size, 2*((size*maxInFlight+p.held-1)/p.held))
	p.perPart = min(max(p.perPart, floor), size)
	return p.perPart
}

// adaptPerPart moves the per-partition limit after a rotated read of a
// full batch of size (p.mu held, c's partitions already marked busy):
//   - a short read that took the limit from some partitions (a backlog in
//     few keys) raises it by what the batch missed, shared among those
//     partitions, so that the next read fills;
//   - a read that finds nothing while partitions that gave an earlier read
//     the limit are in flight (the partitions with a backlog are all busy:
//     the reads are too wide to overlap) doubles it, once for those;
//   - a full read lowers it by an eighth, down to the floor, so that it
//     follows a backlog spreading over more keys again;
//   - a short read within the limit (traffic lighter than a batch), a read
//     the cut shortened (a suspect, the byte budget) and one the horizon
//     held back leave it.
func (p *partitions) adaptPerPart(c driver.Claim, size, maxInFlight int) {
	switch n := len(c.Events); {
	case c.Cut || c.Held:
	case n == 0 && len(p.capped) > 0:
		p.perPart *= 2
		clear(p.capped) // once for the batches in flight: some may have held no more
	case n < size && len(c.Capped) > 0:
		p.perPart += (size - n + len(c.Capped) - 1) / len(c.Capped)
	case n == size:
		p.perPart -= p.perPart / 8
	}
	p.nextPerPart(size, maxInFlight)
}

// readFrom reads a batch from the relay's partitions but busy, in the order
// offset rotates them to, at most perPart events from each, and marks the
// batch's partitions busy.
func (r *Relay) readFrom(ctx context.Context, size int, busy []int32, offset, perPart int) (driver.Claim, error) {
	p := r.parts
	start := time.Now()
	claim, err := p.pc.ReadPartitions(ctx, driver.PartitionClaimParams{RelayID: r.cfg.RelayID, BatchSize: size,
		PerPartition: perPart,
		MinLease:     r.cfg.Lease / 2, Busy: busy, Offset: offset, Skip: r.cfg.OrderedFailure == OrderedFailureSkip,
		MaxBytes: int64(r.cfg.MaxBatchBytes), RecordInFlight: p.inFlight, Unordered: !r.ordered()})
	if err != nil || len(claim.Events) == 0 {
		return claim, err // nothing read: at most Held
	}
	deadline := start.Add(claim.Lease - leaseMargin(r.cfg.Lease))
	p.mu.Lock()
	for _, part := range claim.Parts {
		p.busy[part] = deadline
	}
	for _, part := range claim.Capped {
		p.capped[part] = true
	}
	p.mu.Unlock()
	return claim, nil
}

// readFirst makes the relay's next read, once partition part has no batch
// in flight, read part alone: a suspect read alone goes back when other
// batches are in flight (relay_pipeline.go), and the read that the
// pipeline then lets run alone must take it again, not wait until the
// reads' rotation over the partitions comes back to it (some 255 reads
// under a backlog), nor lose it to older events of other partitions (the
// read keeps its batch in (txid, id) order across partitions). The
// partition is read alone until a read of it returns a suspect or nothing.
func (p *partitions) readFirst(part int32) {
	p.mu.Lock()
	p.first = part
	p.mu.Unlock()
}

// partitionsDone marks the partitions of a settled batch free to read.
func (r *Relay) partitionsDone(c driver.Claim) {
	if r.parts == nil || len(c.Parts) == 0 {
		return
	}
	r.parts.mu.Lock()
	for _, part := range c.Parts {
		delete(r.parts.busy, part)
		delete(r.parts.capped, part)
	}
	r.parts.mu.Unlock()
}
