package outbox

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

// Ordered delivery by owned partitions (docs/ordering.md): on a driver
// that implements driver.PartitionClaimer and a schema at migration 8, an
// ordered relay owns partitions of keys under a lease per partition, reads
// their due events without writing them and writes each event once, when
// it settles it. The batch then goes through the same pipeline as a claimed
// one: its fence carries the partitions and their fences instead of a row
// lease, and a release writes nothing.

// partitions is an ordered relay's share of the partitions.
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
	held   int
	relays int
}

// balanceInterval is how often an ordered relay renews, sheds and takes
// partitions: a quarter lease, so that a partition it holds has more than
// half its lease left whenever it is read.
func (r *Relay) balanceInterval() time.Duration { return max(r.cfg.Lease/4, 10*time.Millisecond) }

// startPartitions switches an ordered relay to owned partitions when the
// driver and schema support them, and takes its first share.
func (r *Relay) startPartitions(ctx context.Context, version int) error {
	r.parts = nil
	pc, ok := r.drv.(driver.PartitionClaimer)
	if !r.ordered() || !ok || version < driver.PartitionedVersion || r.cfg.CaptureSlot != "" {
		return nil
	}
	r.parts = &partitions{pc: pc, busy: map[int32]time.Time{}}
	return r.balance(ctx)
}

// balance runs one balance round.
func (r *Relay) balance(ctx context.Context) error {
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
	held, relays, err := p.pc.BalancePartitions(ctx, driver.BalanceParams{RelayID: r.cfg.RelayID, Lease: r.cfg.Lease,
		Busy: busy, Stuck: stuck})
	if err != nil {
		return err
	}
	p.mu.Lock()
	changed := held != p.held || relays != p.relays
	p.held, p.relays = held, relays
	p.mu.Unlock()
	if changed {
		r.log.Info("partitions held", slog.Int("partitions", held), slog.Int("relays", relays),
			slog.Int("stuck", len(stuck)))
	}
	return nil
}

// balanceLoop runs a balance round every balanceInterval until the relay
// stops.
func (r *Relay) balanceLoop(ctx context.Context) {
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
// busy until the batch is settled (partitionsDone).
func (r *Relay) readPartitions(ctx context.Context, size int) (driver.Claim, error) {
	p := r.parts
	p.round.Lock()
	defer p.round.Unlock()
	p.mu.Lock()
	busy := make([]int32, 0, len(p.busy))
	for part := range p.busy {
		busy = append(busy, part)
	}
	offset := p.offset
	p.offset = (p.offset + 1) % driver.Partitions
	p.mu.Unlock()
	start := time.Now()
	claim, err := p.pc.ReadPartitions(ctx, driver.PartitionClaimParams{RelayID: r.cfg.RelayID, BatchSize: size,
		MinLease: r.cfg.Lease / 2, Busy: busy, Offset: offset, Skip: r.cfg.OrderedFailure == OrderedFailureSkip})
	if err != nil || len(claim.Events) == 0 {
		return driver.Claim{}, err
	}
	if r.cfg.MaxBatchBytes > 0 {
		// The batch is in key order: a cut is a prefix of every key's run.
		var total int
		for i := range claim.Events {
			total += len(claim.Events[i].Payload) + len(claim.Events[i].Headers)
			if i > 0 && total > r.cfg.MaxBatchBytes {
				claim.Events = claim.Events[:i]
				break
			}
		}
	}
	deadline := start.Add(claim.Lease - leaseMargin(r.cfg.Lease))
	p.mu.Lock()
	for _, part := range claim.Parts {
		p.busy[part] = deadline
	}
	p.mu.Unlock()
	return claim, nil
}

// partitionsDone marks the partitions of a settled batch free to read.
func (r *Relay) partitionsDone(c driver.Claim) {
	if r.parts == nil || len(c.Parts) == 0 {
		return
	}
	r.parts.mu.Lock()
	for _, part := range c.Parts {
		delete(r.parts.busy, part)
	}
	r.parts.mu.Unlock()
}
