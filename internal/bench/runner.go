package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// Runner runs scenarios against one database. Each scenario gets a scratch
// schema of its own and pools of its own, so the scenarios do not disturb
// each other's numbers. A Runner is not safe for concurrent use.
type Runner struct {
	cfg     Config
	base    *pgxpool.Config // copied for every pool a scenario opens
	ctl     *pgxpool.Pool   // setup, measurements, cleanup
	payload []byte
	// flushStats is true when the server has pg_stat_force_next_flush
	// (PostgreSQL 15 and later).
	flushStats bool
	server     string
	autovacuum bool
}

// New checks cfg and connects to the database poolConfig names.
func New(ctx context.Context, poolConfig *pgxpool.Config, cfg Config) (*Runner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if poolConfig == nil {
		return nil, &ConfigError{Field: "poolConfig", Err: errors.New("is nil")}
	}
	pc := poolConfig.Copy()
	// One connection: pg_stat_force_next_flush then flushes every change
	// the control connection made (pre-fill, truncate) before a reading.
	pc.MaxConns = 1
	pc.ConnConfig.RuntimeParams["application_name"] = "outbox-bench"
	ctl, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	r := &Runner{cfg: cfg, base: poolConfig.Copy(), ctl: ctl, payload: Payload(cfg.PayloadSize)}
	err = ctl.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('autovacuum')::bool,
    to_regproc('pg_stat_force_next_flush') IS NOT NULL`).Scan(&r.server, &r.autovacuum, &r.flushStats)
	if err != nil {
		ctl.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return r, nil
}

// Close closes the Runner's connections.
func (r *Runner) Close() { r.ctl.Close() }

// Config returns the configuration with defaults filled in.
func (r *Runner) Config() Config { return r.cfg }

// Run runs scenarios: reference and drain once per retention mode (each
// drain report carries the reference run just before it, in the same mode),
// then steady and latency once per wake-up mode in the first retention mode.
// Drain always runs its reference, also when the reference scenario itself
// is not asked for. On error it returns the reports finished so far.
func (r *Runner) Run(ctx context.Context, scenarios []Scenario) (Result, error) {
	res := Result{Settings: r.settings(), Server: r.server, Autovacuum: r.autovacuum, CPUs: runtime.NumCPU(), Notes: []string{
		"The relay, the reference loop and the writers run in the bench process; rss_peak_bytes is that process's resident memory.",
		"The relay's and the reference loop's connections both use outbox.ConfigureRelayPool (synchronous_commit=off); writers use the database's defaults.",
		"Compare ratios taken in one run (ratio_to_reference, writer_tps_ratio); absolute rates drift between runs and machines.",
	}}
	if !r.autovacuum {
		res.Notes = append(res.Notes, "autovacuum is off on this server: dead tuples stay and tables grow until something vacuums them.")
	}
	want := map[Scenario]bool{}
	for _, s := range scenarios {
		want[s] = true
	}
	add := func(rep Report, err error) error {
		if err != nil {
			return err
		}
		res.Scenarios = append(res.Scenarios, rep)
		return nil
	}
	if want[ScenarioReference] || want[ScenarioDrain] {
		for _, mode := range r.cfg.Retentions {
			ref, err := r.Reference(ctx, mode)
			if err != nil {
				return res, err
			}
			if want[ScenarioReference] {
				res.Scenarios = append(res.Scenarios, ref)
			}
			if !want[ScenarioDrain] {
				continue
			}
			d, err := r.Drain(ctx, mode)
			if err != nil {
				return res, err
			}
			d.DrainStats = &DrainStats{ReferenceEventsPerS: ref.EventsPerS, RatioToReference: ratio(d.EventsPerS, ref.EventsPerS)}
			res.Scenarios = append(res.Scenarios, d)
		}
	}
	mode := r.cfg.Retentions[0]
	if want[ScenarioSteady] {
		for _, w := range r.cfg.Wakes {
			if err := add(r.Steady(ctx, mode, w)); err != nil {
				return res, err
			}
		}
	}
	if want[ScenarioLatency] {
		for _, w := range r.cfg.Wakes {
			if err := add(r.Latency(ctx, mode, w)); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

func (r *Runner) settings() Settings {
	s := Settings{
		Events: r.cfg.Events, BatchSize: r.cfg.BatchSize, Workers: r.cfg.Workers, Writers: r.cfg.Writers,
		PayloadSize: len(r.payload), DurationS: r.cfg.Duration.Seconds(), Rate: r.cfg.Rate,
		PollIntervalMS: float64(r.cfg.PollInterval) / float64(time.Millisecond), Sink: r.cfg.SinkName,
	}
	for _, m := range r.cfg.Retentions {
		s.Retentions = append(s.Retentions, string(m))
	}
	for _, w := range r.cfg.Wakes {
		s.Wakes = append(s.Wakes, string(w))
	}
	return s
}

func (r *Runner) progress(format string, args ...any) {
	if r.cfg.Progress != nil {
		r.cfg.Progress(fmt.Sprintf(format, args...))
	}
}

// ratio is a/b, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// scratch is one scenario's schema.
type scratch struct {
	name    string
	table   string // quoted outbox_events
	archive string // quoted outbox_events_archive
	orders  string // quoted orders
}

// schemaComment marks a scratch schema, so an operator who finds one left
// behind (the bench process was killed) knows it is safe to drop.
const schemaComment = "outbox bench scratch schema: safe to drop"

// withScratch creates and migrates a scratch schema, runs fn in it and drops
// it, also when fn fails or ctx is cancelled. It sets rep.Schema.
func (r *Runner) withScratch(ctx context.Context, rep *Report, fn func(s scratch) error) (err error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := r.cfg.SchemaPrefix + hex.EncodeToString(b[:])
	rep.Schema = name
	s := scratch{
		name:    name,
		table:   pgx.Identifier{name, "outbox_events"}.Sanitize(),
		archive: pgx.Identifier{name, "outbox_events_archive"}.Sanitize(),
		orders:  pgx.Identifier{name, "orders"}.Sanitize(),
	}
	schema := pgx.Identifier{name}.Sanitize()
	// CREATE without IF NOT EXISTS: the schema dropped at the end is
	// always one this call created.
	if _, err := r.ctl.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		return fmt.Errorf("create scratch schema %s (the bench needs CREATE on the database): %w", name, err)
	}
	defer func() {
		dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, dropErr := r.ctl.Exec(dropCtx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`); dropErr != nil {
			err = errors.Join(err, fmt.Errorf("drop scratch schema %s: %w (drop it by hand)", name, dropErr))
		}
	}()
	if _, err := r.ctl.Exec(ctx, `COMMENT ON SCHEMA `+schema+` IS '`+schemaComment+`'`); err != nil {
		return fmt.Errorf("comment on scratch schema %s: %w", name, err)
	}
	if _, err := outboxmigrate.Migrate(ctx, outbox.Postgres(r.ctl), outboxmigrate.Config{Schema: name}); err != nil {
		return err
	}
	return fn(s)
}

// pools are the connection pools one scenario opened; close waits until
// their server backends are gone, so that their statistics are flushed
// before the "after" reading.
type pools struct {
	r     *Runner
	names []string
	open  []*pgxpool.Pool
}

// relayPool opens a pool configured like a relay's (outbox.ConfigureRelayPool).
func (p *pools) relayPool(ctx context.Context, relayID string, maxConns int) (*pgxpool.Pool, error) {
	pc := p.r.base.Copy()
	outbox.ConfigureRelayPool(pc, relayID)
	pc.MaxConns = int32(min(maxConns, 1<<20))
	return p.connect(ctx, pc)
}

// writerPool opens a pool with the database's default settings.
func (p *pools) writerPool(ctx context.Context, name string, maxConns int) (*pgxpool.Pool, error) {
	pc := p.r.base.Copy()
	pc.ConnConfig.RuntimeParams["application_name"] = name
	pc.MaxConns = int32(min(maxConns, 1<<20))
	return p.connect(ctx, pc)
}

func (p *pools) connect(ctx context.Context, pc *pgxpool.Config) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	p.names = append(p.names, pc.ConnConfig.RuntimeParams["application_name"])
	p.open = append(p.open, pool)
	return pool, nil
}

// close closes every pool and waits (at most 10 seconds) for their
// backends to exit.
func (p *pools) close(ctx context.Context) {
	for _, pool := range p.open {
		pool.Close()
	}
	p.open = nil
	if len(p.names) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = poll(ctx, 5*time.Millisecond, func() (bool, error) {
		var n int
		err := p.r.ctl.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = ANY($1)`, p.names).Scan(&n)
		return n == 0, err
	})
	p.names = nil
}

// poll calls cond every interval until it returns true, an error, or ctx
// ends.
func poll(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
