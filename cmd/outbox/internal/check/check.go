// Package check is outbox check: a self-contained verification an operator
// runs against their own database (and, optionally, their own sink) to
// prove that a deployment — PgBouncer, a proxy, a failover setup — keeps
// the outbox's guarantees. It creates a scratch outbox of its own, writes
// events to it, relays them with several outbox relay processes that it
// SIGKILLs and restarts at random moments while a fault proxy between the
// relays and the database resets, refuses and blackholes their
// connections, and then checks the invariants the crash tests check: no
// event lost, no ghost event; duplicates, out-of-order deliveries and
// dead-lettered events are counted.
package check

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/faultproxy"
)

// Defaults of Config.
const (
	EventsDefault       = 2000
	AggregatesDefault   = 16
	RelaysDefault       = 3
	DurationDefault     = 20 * time.Second
	KillsDefault        = 6
	CutsDefault         = 4
	DrainTimeoutDefault = 60 * time.Second
)

// Settings of the check's relays: short enough that a killed relay's
// events come back within the run, long enough for a loaded machine.
const (
	relayLease        = 3 * time.Second
	relaySinkTimeout  = time.Second
	relayDBTimeout    = 1500 * time.Millisecond
	relayPoll         = 20 * time.Millisecond
	relayBatchSize    = 50
	relayBackoffBase  = 100 * time.Millisecond
	relayBackoffMax   = time.Second
	relayShutdownWait = time.Second
	// writeBatch is the events the check writes per transaction.
	writeBatch = 25
	// writeShare is the part of Duration over which the events are
	// written; the faults go on a little longer.
	writeShare = 0.8
	// sampleIDs bounds the event IDs a report lists per finding.
	sampleIDs = 20
)

// Config is one check run.
type Config struct {
	// DatabaseURL is the user's database: postgres://…, mysql://… or
	// sqlite:…. The check creates a scratch schema (PostgreSQL), database
	// (MySQL/MariaDB) or file (SQLite) there and never touches the user's
	// outbox tables.
	DatabaseURL string
	// Postgres is DatabaseURL parsed, for PostgreSQL; nil otherwise.
	Postgres *pgxpool.Config
	// PgBouncer passes --pgbouncer to the relays.
	PgBouncer bool
	// Sink is the relays' sink URL; empty for the check's own local HTTP
	// receiver, which counts every delivery. Through another sink the
	// check verifies delivery by the sink's acknowledgements only.
	Sink string
	// RelayArgs are passed to every relay after the check's own flags.
	RelayArgs []string
	// Events are written over Duration. Defaults to EventsDefault.
	Events int
	// Aggregates the events are spread over. Defaults to
	// AggregatesDefault.
	Aggregates int
	// Relays run at once. Defaults to RelaysDefault.
	Relays int
	// Duration is how long events are written and faults injected.
	// Defaults to DurationDefault.
	Duration time.Duration
	// Kills is how many times a relay is SIGKILLed. Negative for none;
	// zero for KillsDefault.
	Kills int
	// Cuts is how many network faults (reset, refusal, blackhole) the
	// proxy injects. Negative for none and no proxy; zero for CutsDefault.
	Cuts int
	// DrainTimeout bounds the wait, after Duration, for every event to be
	// delivered. Defaults to DrainTimeoutDefault.
	DrainTimeout time.Duration
	// Keep leaves the scratch space for inspection.
	Keep bool
	// Seed makes the random choices repeatable; 0 picks one.
	Seed uint64
	// Executable is the outbox binary the relays run.
	Executable string
	// Env is the relays' environment, before the check's own variables.
	Env []string
	// Logger narrates the run. Defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Events = cmp.Or(c.Events, EventsDefault)
	c.Aggregates = cmp.Or(c.Aggregates, AggregatesDefault)
	c.Relays = cmp.Or(c.Relays, RelaysDefault)
	c.Duration = cmp.Or(c.Duration, DurationDefault)
	c.Kills = cmp.Or(c.Kills, KillsDefault)
	c.Cuts = cmp.Or(c.Cuts, CutsDefault)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DrainTimeoutDefault)
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Verification says how deliveries were counted.
type Verification string

const (
	// VerifyReceiver: the local receiver recorded every delivery.
	VerifyReceiver Verification = "receiver"
	// VerifyAcknowledgements: the user's sink acknowledged each event; the
	// check cannot see what the sink did with it, nor duplicates.
	VerifyAcknowledgements Verification = "acknowledgements"
)

// Report is what a check run found.
type Report struct {
	Passed      bool   `json:"passed"`
	Interrupted bool   `json:"interrupted"`
	Database    string `json:"database"`
	// Sink is the user's sink, as the CLI shows it; empty for the local
	// receiver.
	Sink     string       `json:"sink,omitempty"`
	Scratch  string       `json:"scratch"`
	Kept     bool         `json:"scratch_kept"`
	Verified Verification `json:"verified_by"`
	Seed     uint64       `json:"seed"`
	Elapsed  Duration     `json:"elapsed"`

	Written int `json:"written"`
	// WriteRetries counts the check's own writes that failed and were
	// retried (the database restarted or failed over).
	WriteRetries int `json:"write_retries"`
	Aggregates   int `json:"aggregates"`
	Relays       int `json:"relays"`

	Kills        int    `json:"kills"`
	Restarts     int    `json:"relay_restarts"`
	RelayExits   int    `json:"relay_exits"`
	LastExit     string `json:"last_relay_exit,omitempty"`
	Resets       int    `json:"connection_resets"`
	Refusals     int    `json:"connection_refusals"`
	Blackholes   int    `json:"blackholes"`
	ProxySkipped string `json:"proxy_skipped,omitempty"`

	// Delivered counts distinct events the receiver got (or, with
	// acknowledgements, the events the database holds as processed).
	Delivered    int   `json:"delivered"`
	Deliveries   *int  `json:"deliveries"`
	Lost         int   `json:"lost"`
	LostIDs      []int `json:"lost_ids,omitempty"`
	Ghosts       int   `json:"ghosts"`
	GhostIDs     []int `json:"ghost_ids,omitempty"`
	Duplicated   *int  `json:"duplicated"`
	OutOfOrder   *int  `json:"out_of_order"`
	DeadLettered int   `json:"dead_lettered"`
	// Undelivered counts events still pending or in flight when the
	// drain ended: part of Lost, unless the run was interrupted.
	Undelivered int `json:"undelivered"`
}

// Duration is a time.Duration shown as "1.5s" in JSON.
type Duration time.Duration

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(time.Duration(d).Round(time.Millisecond).String())), nil
}

// written is an event the check wrote.
type written struct {
	aggregate string
	seq       int
}

// run is the state of one check run.
type run struct {
	cfg    Config
	id     string
	rng    *rand.Rand
	sc     scratch
	recv   *receiver
	proxy  *faultproxy.Proxy
	fleet  *fleet
	report *Report
	// faultsStart is when writing and the faults began.
	faultsStart time.Time
	mu          sync.Mutex
	written     map[int64]written
}

// Run runs the check. It returns the report of what finished — also when
// ctx is cancelled (Report.Interrupted) — and an error when the check
// itself could not run (the database is unreachable, a relay refused its
// arguments). The scratch space is dropped before Run returns unless
// Config.Keep.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.WithDefaults()
	started := time.Now()
	r := &run{
		cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		written: map[int64]written{},
	}
	r.id = strconv.FormatUint(r.rng.Uint64(), 36)
	r.report = &Report{Seed: cfg.Seed, Aggregates: cfg.Aggregates, Relays: cfg.Relays, Verified: VerifyReceiver}
	if cfg.Sink != "" {
		r.report.Verified = VerifyAcknowledgements
	}
	sc, err := openScratch(ctx, &r.cfg)
	if err != nil {
		return nil, err
	}
	r.sc = sc
	r.report.Scratch = sc.label()
	cfg.Logger.Info("check: created its scratch outbox", "scratch", sc.label())
	runErr := r.run(ctx)
	cleanup := context.WithoutCancel(ctx)
	if runErr == nil || ctx.Err() != nil {
		if err := r.evaluate(cleanup, ctx.Err() != nil); err != nil && runErr == nil {
			runErr = err
		}
	}
	if cfg.Keep {
		r.report.Kept = true
		sc.close()
		cfg.Logger.Info("check: kept its scratch outbox (--keep)", "scratch", sc.label())
	} else {
		dropCtx, cancel := context.WithTimeout(cleanup, 30*time.Second)
		defer cancel()
		if err := sc.drop(dropCtx); err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("drop scratch %s: %w (drop it by hand)", sc.label(), err))
		} else {
			cfg.Logger.Info("check: dropped its scratch outbox", "scratch", sc.label())
		}
	}
	r.report.Elapsed = Duration(time.Since(started))
	r.report.Interrupted = ctx.Err() != nil
	r.report.Passed = runErr == nil && !r.report.Interrupted && r.report.Lost == 0 && r.report.Ghosts == 0
	return r.report, runErr
}

// run writes the events and relays them through the faults, then drains.
func (r *run) run(ctx context.Context) error {
	cfg := r.cfg
	sinkURL := cfg.Sink
	if sinkURL == "" {
		recv, err := startReceiver(ctx, r.id)
		if err != nil {
			return err
		}
		defer recv.close()
		r.recv = recv
		sinkURL = recv.URL()
	}
	proxyAddr := ""
	if cfg.Cuts < 0 {
		r.report.ProxySkipped = "no faults were asked for"
	} else {
		if target, why := r.sc.target(); target == "" {
			r.report.ProxySkipped = why
			cfg.Logger.Warn("check: no connection cuts: " + why)
		} else {
			p, err := faultproxy.Listen(ctx, target)
			if err != nil {
				return err
			}
			defer p.Close()
			r.proxy, proxyAddr = p, p.Addr()
		}
	}
	dbURL, err := r.sc.relayURL(proxyAddr)
	if err != nil {
		return err
	}
	env := environ(cfg.Env, map[string]string{"OUTBOX_DATABASE_URL": dbURL, "OUTBOX_SINK": sinkURL})
	r.fleet = newFleet(cfg.Executable, env, cfg.Relays, r.relayArgs)
	if err := r.fleet.start(); err != nil {
		return err
	}
	defer r.fleet.stop()
	cfg.Logger.Info("check: writing events while killing relays and cutting connections",
		"events", cfg.Events, "relays", cfg.Relays, "duration", cfg.Duration, "kills", max(cfg.Kills, 0), "cuts", max(cfg.Cuts, 0))

	kills, cuts := r.schedule() // before the writer shares r.rng
	r.faultsStart = time.Now()
	chaos, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	writeErr := make(chan error, 1)
	wg.Add(3)
	go func() {
		defer wg.Done()
		if err := r.write(chaos); err != nil {
			writeErr <- fmt.Errorf("write events: %w", err)
			cancel()
		}
	}()
	go func() {
		defer wg.Done()
		r.inject(chaos, kills)
	}()
	go func() {
		defer wg.Done()
		r.inject(chaos, cuts)
	}()
	// Every event written, every fault injected, and Duration over.
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		sleep(chaos, time.Until(r.faultsStart.Add(cfg.Duration)))
		close(finished)
	}()
	var firstErr error
	select {
	case <-finished:
	case err := <-r.fleet.fatal:
		firstErr = err
	case <-ctx.Done():
	}
	cancel()
	<-finished
	select {
	case err := <-writeErr:
		firstErr = cmp.Or(firstErr, err)
	default:
	}
	if r.proxy != nil {
		r.proxy.Heal()
		r.proxy.Allow()
	}
	if firstErr != nil || ctx.Err() != nil {
		return firstErr
	}
	cfg.Logger.Info("check: faults over; waiting for every event to be delivered", "timeout", cfg.DrainTimeout)
	return r.drain(ctx)
}

// relayArgs are the arguments of the relay in slot, started gen-th.
func (r *run) relayArgs(slot, gen int) []string {
	args := []string{"relay", "--log-format", "json", "--log-level", "warn",
		"--relay-id", fmt.Sprintf("outbox-check-%s-r%d-%d", r.id, slot+1, gen),
		"--batch-size", strconv.Itoa(relayBatchSize), "--poll-interval", relayPoll.String(),
		"--lease", relayLease.String(), "--sink-timeout", relaySinkTimeout.String(),
		"--db-timeout", relayDBTimeout.String(), "--shutdown-timeout", relayShutdownWait.String(),
		"--backoff-base", relayBackoffBase.String(), "--backoff-max", relayBackoffMax.String()}
	if s := r.sc.schema(); s != "" {
		args = append(args, "--schema", s)
	}
	if r.cfg.PgBouncer {
		args = append(args, "--pgbouncer")
	}
	return append(args, r.cfg.RelayArgs...)
}

// write writes cfg.Events events in transactions of writeBatch, spread
// over the first writeShare of Duration, with a sequence number per
// aggregate and an idempotency key each, so a failed batch can be retried.
func (r *run) write(ctx context.Context) error {
	cfg := r.cfg
	batches := (cfg.Events + writeBatch - 1) / writeBatch
	interval := time.Duration(float64(cfg.Duration) * writeShare / float64(batches))
	seqs := make([]int, cfg.Aggregates)
	tick := time.NewTicker(max(interval, time.Millisecond))
	defer tick.Stop()
	for left := cfg.Events; left > 0; {
		n := min(left, writeBatch)
		msgs := make([]outbox.Message, n)
		meta := make([]written, n)
		for i := range msgs {
			a := r.rng.IntN(cfg.Aggregates)
			seqs[a]++
			agg := fmt.Sprintf("agg-%d", a+1)
			meta[i] = written{aggregate: agg, seq: seqs[a]}
			msgs[i] = outbox.Message{EventType: "outbox.check", AggregateType: "outbox_check", AggregateID: agg,
				Payload:        payload{Run: r.id, Aggregate: agg, Seq: seqs[a]},
				IdempotencyKey: fmt.Sprintf("outbox-check-%s-%s-%d", r.id, agg, seqs[a])}
		}
		ids, err := r.writeBatchRetrying(ctx, msgs)
		if ctx.Err() != nil {
			return nil // interrupted, or the run ended early: not a write failure
		}
		if err != nil {
			return err
		}
		r.mu.Lock()
		for i, id := range ids {
			r.written[id] = meta[i]
		}
		r.mu.Unlock()
		left -= n
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
	return nil
}

// drain waits until no event is pending or in flight, or DrainTimeout.
func (r *run) drain(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.DrainTimeout)
	defer cancel()
	mgr := r.sc.manager()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		s, err := mgr.Stats(ctx)
		if err == nil && s.Pending == 0 && s.Processing == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				r.cfg.Logger.Warn("check: drain timed out; what is left counts as lost", "pending", s.Pending, "processing", s.Processing)
				return nil
			}
			return nil
		case err := <-r.fleet.fatal:
			return err
		case <-tick.C:
		}
	}
}

// evaluate reads the outcome from the scratch outbox and the receiver and
// fills the report.
// The lost events are counted only when the run was not interrupted.
func (r *run) evaluate(ctx context.Context, interrupted bool) error {
	rep := r.report
	kills, restarts, exits, last := r.fleet.countsOrZero()
	rep.Kills, rep.Restarts, rep.RelayExits, rep.LastExit = kills, restarts, exits, last
	r.mu.Lock()
	written := r.written
	r.mu.Unlock()
	rep.Written = len(written)
	mgr := r.sc.manager()
	dead, err := idsWithStatus(ctx, mgr, outbox.StatusFailed)
	if err != nil {
		return err
	}
	// Only the counts of the events still on their way matter: exact ones
	// from the status indexes, without listing the events.
	stats, err := mgr.Stats(ctx)
	if err != nil {
		return err
	}
	rep.DeadLettered, rep.Undelivered = len(dead), int(stats.Pending+stats.Processing)
	var delivered map[int64]int
	if r.recv != nil {
		counts, first, foreign := r.recv.snapshot()
		delivered = counts
		total, dups := 0, 0
		for _, n := range counts {
			total += n
			dups += n - 1
		}
		for id, n := range foreign {
			total += n
			rep.addGhost(id)
		}
		rep.Deliveries, rep.Duplicated = &total, &dups
		ooo := outOfOrder(first)
		rep.OutOfOrder = &ooo
	} else {
		processed, err := idsWithStatus(ctx, mgr, outbox.StatusProcessed)
		if err != nil {
			return err
		}
		delivered = processed
	}
	for id := range delivered {
		if _, ok := written[id]; ok {
			rep.Delivered++
		} else {
			rep.addGhost(id)
		}
	}
	var lost []int64
	for id := range written {
		if delivered[id] == 0 && dead[id] == 0 {
			lost = append(lost, id)
		}
	}
	slices.Sort(lost)
	if !interrupted {
		rep.Lost = len(lost)
		for _, id := range lost[:min(len(lost), sampleIDs)] {
			rep.LostIDs = append(rep.LostIDs, int(id))
		}
	}
	return nil
}

func (rep *Report) addGhost(id int64) {
	rep.Ghosts++
	if len(rep.GhostIDs) < sampleIDs {
		rep.GhostIDs = append(rep.GhostIDs, int(id))
	}
}

// outOfOrder counts first deliveries whose sequence number is below one
// already delivered for the same aggregate.
func outOfOrder(first []delivery) int {
	highest := map[string]int{}
	n := 0
	for _, d := range first {
		if d.seq < highest[d.aggregate] {
			n++
			continue
		}
		highest[d.aggregate] = d.seq
	}
	return n
}

// idsWithStatus lists the IDs of the scratch outbox's events in status.
func idsWithStatus(ctx context.Context, mgr *outbox.Manager, status outbox.Status) (map[int64]int, error) {
	ids := map[int64]int{}
	var before int64
	for {
		page, err := mgr.ListEvents(ctx, outbox.ListParams{Status: status, BeforeID: before, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("read %s events: %w", status, err)
		}
		for _, e := range page {
			ids[e.ID]++
		}
		if len(page) < 1000 {
			return ids, nil
		}
		before = page[len(page)-1].ID
	}
}
