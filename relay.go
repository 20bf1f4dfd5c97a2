package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/internal/backoff"
	"github.com/outboxkit/outbox/internal/circuit"
	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/errtext"
	"github.com/outboxkit/outbox/internal/leader"
)

// Relay moves events from the outbox table to a sink: it claims due pending
// events in batches under a lease, publishes them and marks them processed,
// retries failures with backoff and dead-letters events that run out of
// attempts. Any number of relays may serve one table.
type Relay struct {
	cfg RelayConfig
	// sinkTimeoutSet: the config set SinkTimeout (checkSinkTimeout).
	sinkTimeoutSet bool
	drv            driver.Driver
	log            *slog.Logger
	wake           chan struct{}
	// turn is the light-traffic turn: the one token in it lets a claim loop
	// whose last claim found less than a full batch claim again, so while
	// events trickle in the loops take turns instead of each claiming on
	// its own timer. next and nextWakeable, read and written only by the
	// loop holding the turn, say when that claim may run and whether a
	// wake-up may bring it forward; heldReads, the same way, counts the
	// reads in a row that found only events the horizon held back, and
	// flowing says the last claim found events.
	turn         chan struct{}
	next         time.Time
	nextWakeable bool
	heldReads    int
	flowing      bool

	batchHooks   []HookBatch
	deadHooks    []HookDeadLetter
	publishHooks []HookPublish
	rescueHooks  []HookRescue
	purgeHooks   []HookPurge
	leaseHooks   []HookLeaderLease
	dlqHooks     []HookDeadLetterRetry
	sinkHooks    []HookSinkState
	// elector holds the job lease, when a scheduled job is enabled.
	elector *leader.Elector

	// circuit is the breaker on the sink (relay_circuit.go); health is the
	// sink's own check, if it has one.
	circuit     *circuit.Breaker
	health      HealthChecker
	trialProbes atomic.Int64
	// report rate-limits the failure warnings and sums the periodic
	// summary (relay_report.go).
	report report

	// book tracks the leased batches, for Stop to report what it left.
	book leaseBook
	// pipe bounds the batches in flight and their bytes
	// (relay_pipeline.go).
	pipe *pipeline
	// proven says a batch delivered an event since the relay started or
	// the sink's circuit last opened; until then batches go one at a time
	// (relay_pipeline.go).
	proven atomic.Bool
	// heartbeat is the relay's row in outbox_relays (relay_heartbeat.go).
	heartbeat heartbeat
	// parts is an ordered relay's share of the partitions, nil when it
	// claims under row leases (relay_partitions.go).
	parts *partitions

	mu       sync.Mutex
	started  bool
	stopping chan struct{}      // closed by Stop: claim no more
	hardStop context.CancelFunc // cancels in-flight publishes
	// settleBase bounds the marks and releases, which outlive the hard
	// stop; abandon, StopGrace after it, gives them up.
	settleBase context.Context
	abandon    context.CancelFunc
	done       chan struct{} // closed when every goroutine has returned
}

// trailingClaimDelay is how soon the relay claims again after a claim that
// found events but not a full batch. Wake-ups do not cut this wait short:
// while events flow, one claim every few milliseconds delivers them all with
// a fraction of the round trips (and of the writers' lost throughput) that a
// claim per commit would cost.
const trailingClaimDelay = 5 * time.Millisecond

// stragglerClaimDelay is how soon the relay claims again after the first
// empty claim that follows events, before it waits for the poll. A writer
// debounces its wake-ups (WriterConfig.NotifyInterval), deciding when it
// writes: a write that did not wake the relay and commits after the
// trailing claim (a slow commit) would otherwise wait for the poll.
const stragglerClaimDelay = 50 * time.Millisecond

// heldReadDelay is how soon an ordered relay reads again after a read that
// found no event but committed events the horizon held back
// (driver.Claim.Held), doubling on every such read in a row, up to
// maxHeldShift times (about a second) and never later than the poll.
const heldReadDelay = time.Millisecond

// maxHeldShift caps the doubling of heldReadDelay (1 ms << 10 is about a
// second).
const maxHeldShift = 10

// maxErrorLen bounds last_error so a sink that returns a whole HTTP body
// cannot bloat the table.
const maxErrorLen = errtext.MaxLen

// NewRelay returns a relay for the outbox table in db. It checks cfg but
// does not touch the database until Start.
func NewRelay(db Database, cfg RelayConfig) (*Relay, error) {
	if db == nil {
		return nil, &ConfigError{Field: "db", Err: errors.New("is nil")}
	}
	sinkTimeoutSet := cfg.SinkTimeout != 0
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Relay{
		cfg:            cfg,
		sinkTimeoutSet: sinkTimeoutSet,
		drv:            db.Driver(cfg.Schema),
		log:            cfg.Logger.With(slog.String("component", "outbox.relay"), slog.String("relay_id", cfg.RelayID)),
		wake:           make(chan struct{}, 1),
		turn:           make(chan struct{}, 1),

		circuit: circuit.New(cfg.ProbeInterval, cfg.ProbeIntervalMax),
		pipe:    newPipeline(cfg.MaxInFlight, cfg.MaxInFlightBytes),
	}
	r.health, _ = cfg.Sink.(HealthChecker)
	r.heartbeat.proc = cfg.relayProcess()
	r.turn <- struct{}{}
	for _, h := range cfg.Hooks {
		if b, ok := h.(HookBatch); ok {
			r.batchHooks = append(r.batchHooks, b)
		}
		if d, ok := h.(HookDeadLetter); ok {
			r.deadHooks = append(r.deadHooks, d)
		}
		if p, ok := h.(HookPublish); ok {
			r.publishHooks = append(r.publishHooks, p)
		}
		if p, ok := h.(HookRescue); ok {
			r.rescueHooks = append(r.rescueHooks, p)
		}
		if s, ok := h.(HookSinkState); ok {
			r.sinkHooks = append(r.sinkHooks, s)
		}
		r.addScheduleHook(h)
	}
	if err := r.newElector(); err != nil {
		return nil, err
	}
	return r, nil
}

// ID is the relay's ID, as stored in locked_by.
func (r *Relay) ID() string { return r.cfg.RelayID }

// Config is the relay's configuration with defaults filled in.
func (r *Relay) Config() RelayConfig { return r.cfg }

// Wake makes an idle relay claim at once instead of waiting out its poll
// interval. Call it after committing a transaction that wrote events when
// the writer and the relay share a process. It never blocks.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Start checks that the outbox table exists and starts the relay's
// goroutines. They run until Stop; ctx is used only for the check and for
// its values.
func (r *Relay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return errors.New("outbox: relay: already started")
	}
	if r.done != nil {
		select {
		case <-r.done:
		default:
			// Stop returned without them: a sink ignored its context.
			return errors.New("outbox: relay: still stopping: a publish of the last run has not returned (the sink ignores its context); try again later")
		}
	}
	if err := r.drv.Ping(ctx); err != nil {
		switch {
		case errors.Is(err, ErrNoTable):
			return fmt.Errorf("outbox: relay: %w (run outbox migrate)", err)
		case errors.Is(err, ErrPooler):
			return fmt.Errorf("outbox: relay: the database is reached through PgBouncer, which refused a startup parameter: %w; "+pgBouncerModeHint, err)
		}
		return fmt.Errorf("outbox: relay: database: %w", err)
	}
	if err := r.checkPooler(ctx); err != nil {
		return err
	}
	// The schema version, read once, when a check below first needs it.
	version := sync.OnceValues(func() (int, error) { return r.drv.SchemaVersion(ctx) })
	if err := r.checkScheduleSchema(version); err != nil {
		return err
	}
	if err := r.checkOrdering(ctx, version); err != nil {
		return err
	}
	if err := r.startPartitions(version); err != nil {
		return err
	}
	// The first beat writes the relay's row, then the others' are read:
	// beside a relay that delivers otherwise, nothing is taken.
	if err := r.startHeartbeat(ctx, version); err != nil {
		return err
	}
	if err := r.takePartitions(ctx); err != nil {
		r.removeHeartbeat(context.WithoutCancel(ctx))
		return err
	}
	r.checkSinkTimeout()
	r.resetCircuit(ctx)
	r.proven.Store(false)
	workCtx, hardStop := context.WithCancel(context.WithoutCancel(ctx))
	r.settleBase, r.abandon = context.WithCancel(context.WithoutCancel(ctx))
	r.started = true
	r.stopping = make(chan struct{})
	r.hardStop = hardStop
	r.done = make(chan struct{})

	var wg sync.WaitGroup
	for i := range r.cfg.Workers {
		wg.Go(func() { r.claimLoop(workCtx, i) })
	}
	wg.Go(func() { r.rescueLoop(workCtx) })
	if r.cfg.SummaryInterval > 0 {
		wg.Go(func() { r.summaryLoop() })
	}
	if p, ok := r.drv.(driver.ArchivePartitioner); ok && r.cfg.Retention == RetainArchive {
		wg.Go(func() { r.archiveMaintenanceLoop(workCtx, p) })
	}
	r.startSchedule(workCtx, wg.Go)
	if r.parts != nil {
		wg.Go(func() { r.balanceLoop(workCtx) })
	}
	if l, ok := r.drv.(driver.Listener); ok && r.cfg.Listen {
		listenCtx, stopListen := context.WithCancel(workCtx)
		wg.Go(func() {
			l.Listen(listenCtx, r.Wake, func(err error) {
				r.log.Warn("listen for new events failed; reconnecting", slog.String("error", err.Error()))
			})
		})
		// The listener ends with the claim loops, not at the hard stop.
		wg.Go(func() {
			select {
			case <-r.stopping:
			case <-listenCtx.Done():
			}
			stopListen()
		})
	}
	settleBase := r.settleBase
	go func() {
		wg.Wait()
		// Settled: the relay is gone from the list before Stop returns,
		// and its partitions are free for the others.
		r.releasePartitions(settleBase)
		r.removeHeartbeat(settleBase)
		close(r.done)
	}()
	r.log.Info("relay started", slog.String("schema", r.cfg.Schema), slog.Int("batch_size", r.cfg.BatchSize),
		slog.Int("workers", r.cfg.Workers), slog.Duration("poll_interval", r.cfg.PollInterval),
		slog.Duration("lease", r.cfg.Lease), slog.Duration("db_timeout", r.cfg.DBTimeout))
	return nil
}

// Stop stops claiming, lets in-flight batches finish publishing and be
// marked, and returns when the relay is idle. If ctx ends first, in-flight
// publishes are cancelled and their events released to pending without
// spending an attempt; Stop waits up to StopGrace more for the releases
// and returns ctx.Err(). It returns then even if the database does not
// answer or the sink ignores the cancellation: the events it could not
// release stay leased until their lease ends (another relay then takes
// them over, without spending an attempt), and it logs how many, until
// when and why. Stop on a relay that is not running returns nil.
func (r *Relay) Stop(ctx context.Context) error {
	return r.stop(ctx, "in-flight batches outlived the stop's context")
}

// stop is Stop. When ctx ends before the in-flight batches finish, it logs
// outlived, with attrs, saying what became of their events, before its last
// line ("relay stopped", or what it left leased), so the log reads in the
// order things happened.
func (r *Relay) stop(ctx context.Context, outlived string, attrs ...any) error {
	r.mu.Lock()
	if !r.started {
		r.mu.Unlock()
		return nil
	}
	select {
	case <-r.stopping:
	default:
		close(r.stopping)
	}
	done, hardStop, abandon := r.done, r.hardStop, r.abandon
	r.mu.Unlock()

	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		hardStop()
		if !waitFor(done, releaseGrace) {
			// The database does not take the releases, or the sink
			// ignores its context: give up the settling, and the
			// goroutines a moment to notice.
			abandon()
			waitFor(done, StopGrace-releaseGrace)
		}
	}
	hardStop()
	abandon()
	r.mu.Lock()
	r.started = false
	r.mu.Unlock()
	if r.cfg.SummaryInterval > 0 {
		// The outcomes since the last tick: the summaries of a run add up
		// to everything it did.
		r.logSummary()
	}
	if err != nil {
		r.log.Warn(outlived+"; they were cancelled and their events released to pending unless reported left leased", attrs...)
	}
	if !r.reportLeft() {
		r.log.Info("relay stopped")
	}
	return err
}

// waitFor waits until ch is closed or d passes, and reports whether ch was
// closed.
func waitFor(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// Run starts the relay and blocks until ctx ends, then stops it gracefully
// within ShutdownTimeout: batches still publishing after that are cancelled
// and released, and Run returns at most StopGrace later (see Stop). It
// returns an error only when the relay cannot start; ctx ending while it
// starts is a clean stop.
func (r *Relay) Run(ctx context.Context) error {
	if err := r.Start(ctx); err != nil {
		if ctx.Err() != nil {
			// Asked to stop before it started: a Start that fails has
			// taken nothing, and undone its heartbeat row.
			return nil
		}
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ShutdownTimeout)
	defer cancel()
	// An error is still a clean stop: nothing is lost; stop logged what
	// it released and what it left leased, if anything.
	_ = r.stop(stopCtx, "in-flight batches outlived the shutdown timeout",
		slog.Duration("shutdown_timeout", r.cfg.ShutdownTimeout))
	return nil
}

func (r *Relay) isStopping() bool {
	select {
	case <-r.stopping:
		return true
	default:
		return false
	}
}

// drainWake discards a pending wake-up.
func (r *Relay) drainWake() {
	select {
	case <-r.wake:
	default:
	}
}

// sleep waits d, or less when the relay stops or is woken; it reports false
// when the relay is stopping.
func (r *Relay) sleep(d time.Duration, wakeable bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	var wake <-chan struct{}
	if wakeable {
		wake = r.wake
	}
	select {
	case <-r.stopping:
		return false
	case <-wake:
		return true
	case <-t.C:
		return true
	}
}

// claimLoop claims, publishes and settles batches until the relay stops.
//
// While claims come back full, every loop claims again at once, so a
// backlog drains with all of them. Once a claim comes back short the loops
// take turns (Relay.turn): the one holding the turn waits until the next
// claim is due (trailingClaimDelay after a short claim, stragglerClaimDelay
// after the first empty one, PollInterval or a wake-up after the next),
// claims, and hands the turn on before it publishes. Light traffic then
// costs one claim per trailingClaimDelay for the whole relay, not one per
// loop, with batches as big as the traffic makes them, while publishing
// still runs in every loop at once.
//
// A loop does not wait for its batch: it takes a slot of the pipeline
// before each claim, publishes and settles the batch on a goroutine of its
// own and claims the next at once (relay_pipeline.go). It returns only
// once every batch it claimed is settled. A probe's batch is handled in the
// loop itself: it decides the circuit before anything more is claimed.
func (r *Relay) claimLoop(ctx context.Context, worker int) {
	log := r.log.With(slog.Int("worker", worker))
	// The batches this loop handed on (relay_pipeline.go): the loop
	// returns only once they are settled, so Stop waits for them.
	var inFlight sync.WaitGroup
	defer inFlight.Wait()
	failures := 0
	full := false // the last claim filled a batch: claim without the turn
	for !r.isStopping() {
		if !r.pipe.acquire(r.stopping, func() bool { return !r.proven.Load() }) {
			return
		}
		probe, ok := r.awaitCircuit(ctx)
		if !ok {
			r.pipe.giveBack()
			return
		}
		holding := false
		if !full {
			select {
			case <-r.turn:
				holding = true
			case <-r.stopping:
				r.pipe.giveBack()
				return
			}
			if wait := time.Until(r.next); wait > 0 && !r.sleep(wait, r.nextWakeable) {
				r.turn <- struct{}{}
				r.pipe.giveBack()
				return
			}
		}
		if !probe && r.circuit.State() != circuit.Closed {
			// A batch in flight found the sink down while this loop
			// waited for its turn: claim nothing until it answers.
			if holding {
				r.turn <- struct{}{}
			}
			r.pipe.giveBack()
			continue
		}
		// A wake-up that arrived before this claim is answered by it: the
		// writer committed before waking, so the claim sees the event.
		r.drainWake()
		settled := r.pipe.settled()
		start := time.Now()
		claim, err := r.claim(ctx, probe)
		n := len(claim.Events)
		// A partition read that took all it could from some partitions
		// (driver.Claim.Capped) may leave more there: claim again at once.
		full = err == nil && (n == r.cfg.BatchSize || len(claim.Capped) > 0)
		if holding {
			switch {
			case err != nil || full:
				r.next = time.Time{}
			case claim.Held:
				// An ordered read found nothing but committed events an
				// older transaction still held back: it ends within
				// milliseconds as a rule, and nothing else would wake the
				// relay when it does, so read again soon, backing off
				// while it keeps running, and at the latest at the poll.
				r.next, r.nextWakeable = time.Now().Add(min(heldReadDelay<<r.heldReads, r.cfg.PollInterval)), true
				r.heldReads = min(r.heldReads+1, maxHeldShift)
			case n > 0:
				// Events are flowing: claim again shortly, which also picks
				// up what writers committed without a wake-up of their own.
				// Wake-ups do not cut this short.
				r.next, r.nextWakeable = time.Now().Add(min(trailingClaimDelay, r.cfg.PollInterval)), false
			case r.flowing:
				// The first empty claim after events: one more look for
				// a write that committed late without a wake-up of its own.
				r.next, r.nextWakeable = time.Now().Add(min(stragglerClaimDelay, r.cfg.PollInterval)), true
			default:
				r.next, r.nextWakeable = time.Now().Add(r.cfg.PollInterval), true
			}
			if err != nil || !claim.Held {
				r.heldReads, r.flowing = 0, err == nil && n > 0
			}
			r.turn <- struct{}{}
		}
		if probe && (err != nil || n == 0) {
			r.probeFailed(ctx, err)
		}
		if err != nil {
			r.pipe.giveBack()
			if r.isStopping() || ctx.Err() != nil {
				return
			}
			failures++
			wait := backoff.Exponential(failures-1, 100*time.Millisecond, 5*time.Second)
			r.warnDB(log, "claim", err, wait)
			if !r.sleep(wait, false) {
				return
			}
			continue
		}
		if failures > 0 {
			log.Info("claims resumed", slog.Int("failed_claims", failures))
			failures = 0
		}
		if n == 0 {
			if r.ordered() || r.parts != nil {
				// The claim skipped the keys (on owned partitions, the
				// partitions) of the batches in flight: a key's next event
				// (any event of a partition), committed while its batch was
				// publishing, waits for that batch, and its settling wakes
				// nobody else.
				r.pipe.wakeOnSettle(settled, r.Wake)
			}
			r.pipe.giveBack()
			continue
		}
		r.noteClaim(claim)
		log.Debug("claimed", slog.Int("batch_size", n))
		// A suspect goes out with nothing else in flight
		// (relay_pipeline.go). A probe is published as it is: it decides
		// the circuit, and the loops waiting for that may already count as
		// claiming. A partition read holding a suspect holds it alone
		// (the read's cut); sent back, the next read, alone, starts at its
		// partition.
		size, suspect := claimBytes(claim), !probe && holdsSuspect(claim)
		publish := r.pipe.hold(size, suspect)
		if !publish && r.parts != nil && len(claim.Parts) > 0 {
			r.parts.readFirst(claim.Parts[0])
		}
		claimDur := time.Since(start)
		if probe {
			// A probe decides the circuit before anything else is claimed.
			r.handle(ctx, claim, claimDur, probe, publish)
			r.pipe.done(size)
			continue
		}
		inFlight.Go(func() {
			defer r.pipe.done(size)
			r.handle(ctx, claim, claimDur, false, publish)
		})
	}
}

// claim leases a batch, within DBTimeout; a probe of the sink claims one
// event every other time.
func (r *Relay) claim(ctx context.Context, probe bool) (driver.Claim, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	defer cancel()
	size := r.cfg.BatchSize
	if probe && r.trialProbes.Add(1)%2 == 1 {
		// Every other trial publishes one event, the others a batch
		// (relay_circuit.go).
		size = 1
	}
	if r.parts != nil {
		return r.readPartitions(ctx, size)
	}
	if r.ordered() {
		return r.claimOrdered(ctx, size)
	}
	return r.drv.Claim(ctx, driver.ClaimParams{RelayID: r.cfg.RelayID, BatchSize: size,
		Lease: r.cfg.Lease, EventTypes: r.cfg.EventTypes, MaxBytes: int64(r.cfg.MaxBatchBytes),
		CaptureSlot: r.cfg.CaptureSlot})
}

// handle publishes a claimed batch and settles every event's outcome; a
// probe's batch decides the sink's circuit (relay_circuit.go). A batch the
// pipeline would not let publish (a suspect's, claimed while other batches
// were in flight: relay_pipeline.go) goes back unpublished.
func (r *Relay) handle(ctx context.Context, claim driver.Claim, claimDur time.Duration, probe, publish bool) {
	events := eventsFromRows(claim.Events)
	r.stampSource(events)
	fence := driver.Fence{RelayID: r.cfg.RelayID, LockedUntil: claim.LockedUntil, Parts: claim.Parts, Fences: claim.Fences,
		InFlight: claim.InFlight}
	defer r.partitionsDone(claim)
	r.book.claimed(fence, len(events), r.cfg.Lease)
	defer r.book.finish(fence)
	// What was left of the lease when the batch was claimed: all of it for
	// a row lease, the partitions' remaining lease for a partition read.
	lease := r.cfg.Lease
	if claim.Lease > 0 {
		lease = claim.Lease
	}
	// Marks must land even while the relay shuts down, but never after the
	// lease (by then another relay may own the rows, and the fence would
	// make the mark a no-op anyway), nor after Stop gave up on them. A
	// partition batch's lease is what its partitions had left at the read,
	// and its publish is cut before that (publishWithin); the balance
	// rounds renew the partitions while it is in flight, and its marks are
	// fenced in the database, so they get a database call's time more to
	// mark what the cut publish left.
	settleFor := lease - claimDur
	if len(fence.Parts) > 0 {
		settleFor += r.cfg.DBTimeout
	}
	settleCtx, cancel := context.WithTimeout(r.settleBase, settleFor)
	defer cancel()
	info := BatchInfo{RelayID: r.cfg.RelayID, Events: events, ClaimDuration: claimDur}

	if unsent := r.handBack(probe, publish); unsent != nil {
		// Claimed while Stop was being called, while a batch in flight
		// found the sink down, or a suspect while other batches were in
		// flight: hand the events back unpublished, with no attempt spent.
		info.Errors = BatchError(len(events), unsent)
		r.book.settling(fence)
		info.Released = r.release(settleCtx, fence, ids(events))
		r.runBatchHooks(ctx, info)
		return
	}

	pubStart := time.Now()
	var errs []error
	deadline := pubStart.Add(lease - claimDur - leaseMargin(r.cfg.Lease))
	switch {
	case r.ordered():
		errs = r.publishWithin(WithKeyOrder(ctx), events, deadline)
	case len(fence.Parts) > 0:
		errs = r.publishWithin(ctx, events, deadline)
	default:
		errs = r.publish(ctx, events)
	}
	r.book.settling(fence)
	info.PublishedAt = time.Now()
	info.PublishDuration = info.PublishedAt.Sub(pubStart)
	info.Errors = errs

	var (
		done     []int64
		released []int64
		failures []driver.Failure
		byID     = make(map[int64]int, len(events))
	)
	hardStopped := ctx.Err() != nil
	down := !hardStopped && sinkDown(errs)
	var lastErr, downErr error
	for i := range events {
		e := &events[i]
		byID[e.ID] = i
		switch err := errs[i]; {
		case err == nil:
			done = append(done, e.ID)
		case hardStopped && !IsPermanent(err):
			// Cancelled by a hard stop, not by the sink: no attempt spent.
			released = append(released, e.ID)
		case errors.Is(err, ErrEarlierEventFailed) || errors.Is(err, errLeaseEnding):
			// Not sent: it waits behind its aggregate's earlier event, or
			// for a claim with time left. No attempt spent.
			released = append(released, e.ID)
		case down && sinkUnavailable(err):
			// The sink is unreachable: no attempt spent either.
			released = append(released, e.ID)
			lastErr, downErr = err, err
		default:
			lastErr = err
			failures = append(failures, driver.Failure{
				ID: e.ID, Error: r.failureText(e, err), Permanent: IsPermanent(err),
				Delay: backoff.Exponential(e.Attempts+1, r.cfg.BackoffBase, r.cfg.BackoffMax),
			})
		}
	}

	if !hardStopped {
		// Before the events are released: the loops, which claim while
		// this batch settles, must find the circuit open, not claim the
		// released events again and publish them to the sink that is down.
		r.settleCircuit(ctx, probe, down, downErr)
	}
	if len(done) > 0 && !hardStopped {
		r.proven.Store(true)
	}
	markStart := time.Now()
	if len(done) > 0 {
		info.Published, info.Dead = r.markProcessed(settleCtx, fence, done)
	}
	if len(failures) > 0 {
		res, refused := r.markFailed(settleCtx, fence, failures)
		info.Retried, info.Dead = len(res.Retried), info.Dead+len(res.Dead)+refused
		for _, id := range res.Dead {
			e := events[byID[id]]
			err := errs[byID[id]]
			e.Status, e.Attempts, e.LastError = StatusFailed, e.Attempts+1, r.failureText(&e, err)
			r.deadLetter(settleCtx, e, err)
		}
	}
	if len(released) > 0 {
		info.Released = r.release(settleCtx, fence, released)
	}
	info.MarkDuration = time.Since(markStart)
	if !hardStopped {
		r.noteFailures(len(failures)+len(released), lastErr)
	}
	r.runBatchHooks(ctx, info)
}

// handBack says why a batch just claimed is not to be published: the
// relay is stopping, the sink's circuit opened while the claim ran
// (another batch in flight found the sink down, and its events may be in
// this claim), or the pipeline would not let it publish (publish false: a
// suspect beside other batches); nil to publish it. A probe's batch is
// published unless the relay stops (the pipeline never holds one back).
func (r *Relay) handBack(probe, publish bool) error {
	switch {
	case r.isStopping():
		return errStopped
	case !probe && r.circuit.State() != circuit.Closed:
		return errCircuitOpen
	case !publish:
		return errSuspectWaits
	}
	return nil
}

// publish calls the sink under the sink timeout, with the publish hooks
// around it, and returns one error per event.
func (r *Relay) publish(ctx context.Context, events []Event) []error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.SinkTimeout)
	defer cancel()
	var done []func(error)
	if len(r.publishHooks) > 0 {
		done = r.startPublishHooks(ctx, events)
	}
	errs := r.callSink(ctx, events)
	for i, d := range done {
		if d != nil {
			err := errs[i/len(r.publishHooks)]
			r.safeHook(func() { d(err) })
		}
	}
	return errs
}

// callSink calls the sink and normalizes its answer to one error per event;
// a panic fails the whole batch, retryably.
func (r *Relay) callSink(ctx context.Context, events []Event) (errs []error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("sink panicked", slog.Any("panic", p))
			errs = BatchError(len(events), fmt.Errorf("sink panicked: %v", p))
		}
	}()
	errs = r.cfg.Sink.Publish(ctx, events)
	switch {
	case errs == nil:
		errs = make([]error, len(events))
	case len(errs) != len(events):
		errs = BatchError(len(events), fmt.Errorf("sink returned %d results for %d events", len(errs), len(events)))
	}
	return errs
}

// startPublishHooks calls every HookPublish for every event and returns the
// done functions, len(events)·len(hooks) of them, event-major.
func (r *Relay) startPublishHooks(ctx context.Context, events []Event) []func(error) {
	done := make([]func(error), 0, len(events)*len(r.publishHooks))
	for i := range events {
		e := &events[i]
		for _, h := range r.publishHooks {
			var d func(error)
			r.safeHook(func() { d = h.OnPublish(ctx, e) })
			done = append(done, d)
		}
	}
	return done
}

// markProcessed marks published events processed (or deletes or archives
// them) and returns how many it marked, and how many it dead-lettered
// because the database refused their mark (settle.go).
func (r *Relay) markProcessed(ctx context.Context, f driver.Fence, idList []int64) (marked, refused int) {
	var n int64
	err := r.retryDB(ctx, f, len(idList), "mark processed", func(ctx context.Context) (err error) {
		n, err = r.drv.MarkProcessed(ctx, f, idList, driver.Retention(r.cfg.Retention))
		return err
	})
	switch {
	case errors.Is(err, driver.ErrDataRefused):
		n, refused = r.markProcessedEach(ctx, f, idList, err)
	case err != nil:
		return 0, 0 // abandoned, and logged: the events are rescued
	}
	r.reportLostLease("processed", len(idList), n+int64(refused))
	return int(n), refused
}

// markFailed records failed publishes, and returns how many events it
// dead-lettered because the database refused their mark (settle.go) apart
// from the result.
func (r *Relay) markFailed(ctx context.Context, f driver.Fence, failures []driver.Failure) (driver.FailResult, int) {
	var (
		res     driver.FailResult
		refused int
	)
	err := r.retryDB(ctx, f, len(failures), "mark failed", func(ctx context.Context) (err error) {
		res, err = r.drv.MarkFailed(ctx, f, r.cfg.MaxAttempts, failures)
		return err
	})
	switch {
	case errors.Is(err, driver.ErrDataRefused):
		res, refused = r.markFailedEach(ctx, f, failures, err)
	case err != nil:
		return driver.FailResult{}, 0 // abandoned, and logged: the events are rescued
	}
	r.reportLostLease("failed", len(failures), int64(len(res.Retried)+len(res.Dead)+refused))
	for _, fl := range failures {
		r.log.Debug("publish failed", slog.Int64("event_id", fl.ID), slog.Bool("permanent", fl.Permanent), slog.String("error", fl.Error))
	}
	return res, refused
}

func (r *Relay) release(ctx context.Context, f driver.Fence, idList []int64) int {
	var n int64
	err := r.retryDB(ctx, f, len(idList), "release", func(ctx context.Context) (err error) {
		n, err = r.drv.Release(ctx, f, idList)
		return err
	})
	if errors.Is(err, driver.ErrDataRefused) {
		r.log.Error("release refused by the database; the events stay leased until their lease expires",
			slog.Int("events", len(idList)), slog.String("error", err.Error()))
	}
	return int(n)
}

// reportLostLease logs marks that found their rows re-claimed: the events
// were (or will be) published again by the relay that holds them now.
func (r *Relay) reportLostLease(mark string, want int, got int64) {
	if int64(want) != got {
		r.log.Warn("lease lost before mark; another relay owns the events",
			slog.String("mark", mark), slog.Int("events", want), slog.Int64("marked", got))
	}
}

// retryDB runs op, each try within DBTimeout, until it succeeds or ctx
// ends: the lease runs out, or Stop gives up on settling. It returns op's
// last error: nil; one wrapping driver.ErrDataRefused, returned at once
// since the same statement would fail again (settle.go); or the error at
// which it gave up. It keeps the lease book of the n events under f.
// Other database errors never consume an event's attempts: if the lease
// runs out, the events are rescued and published again.
func (r *Relay) retryDB(ctx context.Context, f driver.Fence, n int, what string, op func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		opCtx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
		err := op(opCtx)
		cancel()
		if err == nil {
			r.book.settled(f, n)
			return nil
		}
		if errors.Is(err, driver.ErrDataRefused) {
			return err
		}
		if ctx.Err() == nil {
			wait := backoff.Exponential(attempt, 50*time.Millisecond, 2*time.Second)
			r.warnDB(r.log, what, err, wait)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
				continue
			}
		}
		r.book.failed(f, err)
		why := "the lease ran out; the events will be rescued and published again"
		if len(f.Parts) > 0 {
			why = "the partitions' lease ran out; the events stay pending and are published again"
		}
		if r.settleBase.Err() != nil {
			why = "the relay stopped before the database took it; the events stay leased until the lease ends, then are rescued and published again"
		}
		r.log.Error(what+" abandoned: "+why, slog.Int("events", n), slog.String("error", err.Error()))
		return err
	}
}

func (r *Relay) deadLetter(ctx context.Context, e Event, err error) {
	r.log.Error("event dead-lettered", slog.Int64("event_id", e.ID), slog.String("event_type", e.EventType),
		slog.Int("attempts", e.Attempts), slog.Bool("permanent", IsPermanent(err)), slog.String("error", e.LastError))
	for _, h := range r.deadHooks {
		r.safeHook(func() { h.OnDeadLetter(ctx, e, err) })
	}
}

func (r *Relay) runBatchHooks(ctx context.Context, info BatchInfo) {
	r.report.batch(info)
	for _, h := range r.batchHooks {
		r.safeHook(func() { h.OnBatch(ctx, info) })
	}
}

// safeHook keeps a panicking hook from killing the relay.
func (r *Relay) safeHook(call func()) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("hook panicked", slog.Any("panic", p))
		}
	}()
	call()
}

// rescueLoop settles events whose lease expired (rescue.go) every
// RescueInterval, and renews the relay's heartbeat row every
// HeartbeatInterval (relay_heartbeat.go): one timer for both, ticking at
// the shorter interval.
func (r *Relay) rescueLoop(ctx context.Context) {
	const limit = 1000
	tick := r.cfg.RescueInterval
	if r.cfg.HeartbeatInterval > 0 {
		tick = min(tick, r.cfg.HeartbeatInterval)
	}
	var lastRescue time.Time
	for {
		if lastRescue.IsZero() || time.Since(lastRescue) >= r.cfg.RescueInterval-tick/2 {
			lastRescue = time.Now()
			for {
				n, err := r.rescue(ctx, limit)
				if err != nil {
					if ctx.Err() == nil && !r.isStopping() {
						r.warnDB(r.log, "lease rescue", err, r.cfg.RescueInterval)
					}
					break
				}
				if n < limit {
					break
				}
			}
		}
		if r.heartbeatDue(tick) && !r.isStopping() {
			_ = r.beat(ctx, false)
		}
		if !r.sleep(tick, false) {
			return
		}
	}
}

func ids(events []Event) []int64 {
	out := make([]int64, len(events))
	for i := range events {
		out[i] = events[i].ID
	}
	return out
}

// retryableMarker is the note sinks add to an error the relay will retry.
const retryableMarker = " (retryable)"

// failureText is the last_error stored for e's failed publish. On the
// attempt that dead-letters e, the sinks' "(retryable)" note would mislead
// the operator reading it, so it is dropped there.
func (r *Relay) failureText(e *Event, err error) string {
	msg := err.Error()
	limit := e.MaxAttempts
	if limit == 0 {
		limit = r.cfg.MaxAttempts
	}
	if IsPermanent(err) || e.Attempts+1 >= limit {
		msg = strings.ReplaceAll(msg, retryableMarker, "")
	}
	return truncate(msg)
}

// truncate makes a publish error storable as last_error: valid UTF-8, no
// NUL byte (the database would refuse the mark, every time), at most
// maxErrorLen bytes.
func truncate(s string) string { return errtext.Sanitize(s, maxErrorLen) }
