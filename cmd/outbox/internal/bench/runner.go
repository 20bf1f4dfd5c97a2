package bench

import (
	"context"
	"crypto/rand"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cmd/outbox/internal/dburl"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// Runner runs scenarios against one database. Each scenario gets scratch
// space of its own — a schema on PostgreSQL, a file on SQLite, a database on
// MySQL/MariaDB — and pools of its own, so the scenarios do not disturb
// each other's numbers. A Runner is not safe for concurrent use.
type Runner struct {
	cfg     Config
	st      store
	info    storeInfo
	payload []byte
	// timeline is Config.Timeline as CSV; nil without one.
	timeline *csv.Writer
}

// New checks cfg and connects to the PostgreSQL database poolConfig names.
func New(ctx context.Context, poolConfig *pgxpool.Config, cfg Config) (*Runner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if poolConfig == nil {
		return nil, &ConfigError{Field: "poolConfig", Err: errors.New("is nil")}
	}
	st, err := openPostgres(ctx, poolConfig)
	if err != nil {
		return nil, err
	}
	return newRunner(st, cfg), nil
}

// Open checks cfg and connects to the database url names: PostgreSQL as
// New does, SQLite (scratch files next to the URL's file, which is never
// opened) or MySQL/MariaDB (scratch databases; the URL's database is never
// used). Wake-up mode listen needs PostgreSQL: elsewhere Open refuses it
// with a *ConfigError for Wakes.
func Open(ctx context.Context, url *dburl.Config, cfg Config) (*Runner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if url == nil || (url.Kind == dburl.KindPostgres) != (url.Postgres != nil) {
		return nil, &ConfigError{Field: "url", Err: errors.New("is not a URL dburl.Parse returned")}
	}
	if url.Kind != dburl.KindPostgres && captureStreams(cfg.Capture) {
		return nil, &ConfigError{Field: "Capture", Err: fmt.Errorf(
			"is %s, which streams from PostgreSQL's logical replication: %s has none, use poll", cfg.Capture, kindName(url.Kind))}
	}
	if url.Kind != dburl.KindPostgres && slices.Contains(cfg.Wakes, WakeListen) {
		return nil, &ConfigError{Field: "Wakes", Err: fmt.Errorf(
			"has listen, which needs PostgreSQL's LISTEN/NOTIFY: %s has none, use poll or process", kindName(url.Kind))}
	}
	var (
		st  store
		err error
	)
	switch url.Kind {
	case dburl.KindPostgres:
		st, err = openPostgres(ctx, url.Postgres)
	case dburl.KindSQLite:
		st, err = openSQLite(ctx, url, cfg.SchemaPrefix)
	default:
		st, err = openMySQL(ctx, url)
	}
	if err != nil {
		return nil, err
	}
	return newRunner(st, cfg), nil
}

func kindName(k dburl.Kind) string {
	switch k {
	case dburl.KindSQLite:
		return "SQLite"
	case dburl.KindPostgres:
		return "PostgreSQL"
	}
	return "MySQL/MariaDB"
}

func newRunner(st store, cfg Config) *Runner {
	return &Runner{cfg: cfg, st: st, info: st.about(), payload: Payload(cfg.PayloadSize)}
}

// Close closes the Runner's connections.
func (r *Runner) Close() { r.st.close() }

// Config returns the configuration with defaults filled in.
func (r *Runner) Config() Config { return r.cfg }

// Run runs scenarios: reference-minimal and sink once, then reference and
// drain once per retention mode (each drain report carries the reference
// run just before it, in the same mode), then steady and latency once per
// wake-up mode in the first retention mode (latency followed by an ordered
// latency per Config.OrderedKeys entry). Drain always runs its
// reference, also when the reference scenario itself is not asked for.
// When drain and sink run together with a sink other than Discard, each
// unordered drain also runs as a discard drain just before it (a report
// with Sink "discard:"), and the drain's report carries LimitEventsPerS and
// RatioToLimit. With Config.PlainLoopURL, each unordered drain is followed
// by the plain loop (PlainLoop), and its report carries PlainLoopEventsPerS
// and RatioToPlainLoop. Then receive, then tenants. reference-minimal, receive
// and tenants are PostgreSQL's: elsewhere Run leaves them out with a note.
// On error it returns the reports finished so far.
func (r *Runner) Run(ctx context.Context, scenarios []Scenario) (res Result, err error) {
	res = Result{Settings: r.settings(), Database: r.info.kind, Server: r.info.server, Autovacuum: r.info.autovacuum,
		CPUs: runtime.NumCPU(), MachineCPUs: machineCores(), Notes: []string{
			"The relay, the reference loop and the writers run in the bench process; rss_peak_bytes is that process's resident memory.",
			"Compare ratios taken in one run (ratio_to_reference, ratio_to_limit, writer_tps_ratio); absolute rates drift between runs and machines.",
		}}
	if res.MachineCPUs > 0 {
		res.Notes = append(res.Notes, "machine CPU (machine_cpu_s_per_event) is the whole machine's busy CPU time per event, all cores, from /proc/stat:"+
			" the bench process, the database, a broker on this machine and anything else running; cpu_limit_events_per_s is the rate at which"+
			" the discard drain's and the sink scenario's costs together fill every core (a broker on another host is not in it).")
	}
	res.Notes = append(res.Notes, r.info.notes...)
	want := map[Scenario]bool{}
	for _, s := range scenarios {
		want[s] = true
	}
	defer func() {
		for i := range res.Scenarios {
			res.Scenarios[i].MachineCPUSPerEvent = cpuPerEvent(res.Scenarios[i])
		}
	}()
	add := func(rep Report, err error) error {
		if err != nil {
			return err
		}
		res.Scenarios = append(res.Scenarios, rep)
		return nil
	}
	if want[ScenarioReferenceMinimal] {
		if _, ok := r.st.(*pgStore); ok {
			if err := add(r.ReferenceMinimal(ctx)); err != nil {
				return res, err
			}
			res.Notes = append(res.Notes, "reference-minimal commits durably (synchronous_commit=on), as issue 14's hand-written loop did; reference and the relay do not.")
		} else {
			res.Notes = append(res.Notes, fmt.Sprintf("reference-minimal did not run: it is PostgreSQL's, and this is %s.", res.DatabaseName()))
		}
	}
	var sinkRate, sinkCPU float64
	if want[ScenarioSink] {
		rep, err := r.Sink(ctx)
		if err != nil {
			return res, err
		}
		res.Scenarios = append(res.Scenarios, rep)
		sinkRate, sinkCPU = rep.EventsPerS, cpuPerEvent(rep)
	}
	_, discarding := r.cfg.Sink.(Discard)
	withLimit := want[ScenarioSink] && want[ScenarioDrain] && !discarding
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
			var discardRate, discardCPU float64
			if withLimit {
				dd, err := r.drain(ctx, mode, 0, Discard{}, discardSinkName)
				if err != nil {
					return res, err
				}
				dd.DrainStats = &DrainStats{ReferenceEventsPerS: ref.EventsPerS, RatioToReference: ratio(dd.EventsPerS, ref.EventsPerS)}
				res.Scenarios = append(res.Scenarios, dd)
				discardRate, discardCPU = dd.EventsPerS, cpuPerEvent(dd)
			}
			if captureStreams(r.cfg.Capture) {
				c, err := r.captureDrain(ctx, mode)
				if err != nil {
					return res, err
				}
				c.DrainStats = &DrainStats{ReferenceEventsPerS: ref.EventsPerS, RatioToReference: ratio(c.EventsPerS, ref.EventsPerS)}
				res.Scenarios = append(res.Scenarios, c)
				if !capturePolls(r.cfg.Capture) {
					continue
				}
			}
			d, err := r.Drain(ctx, mode)
			if err != nil {
				return res, err
			}
			d.DrainStats = &DrainStats{ReferenceEventsPerS: ref.EventsPerS, RatioToReference: ratio(d.EventsPerS, ref.EventsPerS)}
			if withLimit {
				limit := min(discardRate, sinkRate)
				d.LimitEventsPerS, d.DiscardDrainEventsPerS, d.SinkEventsPerS = limit, discardRate, sinkRate
				d.RatioToLimit = ratio(d.EventsPerS, limit)
				d.DiscardDrainCPUSPerEvent, d.SinkCPUSPerEvent = discardCPU, sinkCPU
				d.CPULimitEventsPerS = cpuLimit(res.MachineCPUs, discardCPU, sinkCPU)
				d.RatioToCPULimit = ratio(d.EventsPerS, d.CPULimitEventsPerS)
			}
			if r.cfg.PlainLoopURL != "" {
				pl, err := r.PlainLoop(ctx, mode)
				if err != nil {
					return res, err
				}
				d.PlainLoopEventsPerS, d.RatioToPlainLoop = pl.EventsPerS, ratio(d.EventsPerS, pl.EventsPerS)
			}
			res.Scenarios = append(res.Scenarios, d)
			for _, keys := range r.cfg.OrderedKeys {
				o, err := r.drain(ctx, mode, keys, nil, "")
				if err != nil {
					return res, err
				}
				o.DrainStats = &DrainStats{ReferenceEventsPerS: ref.EventsPerS, RatioToReference: ratio(o.EventsPerS, ref.EventsPerS),
					RatioToUnordered: ratio(o.EventsPerS, d.EventsPerS)}
				res.Scenarios = append(res.Scenarios, o)
			}
		}
	}
	mode := r.cfg.Retentions[0]
	wakes := captureWakes(r.cfg.Capture, r.cfg.Wakes)
	if want[ScenarioSteady] {
		for _, w := range wakes {
			if err := add(r.Steady(ctx, mode, w)); err != nil {
				return res, err
			}
		}
	}
	if want[ScenarioLatency] {
		for _, w := range wakes {
			if err := add(r.Latency(ctx, mode, w)); err != nil {
				return res, err
			}
			if w == WakeLogical && len(r.cfg.OrderedKeys) > 0 {
				res.Notes = append(res.Notes, "ordered latency did not run with wake logical: the capture relay has no ordered mode.")
				continue
			}
			for _, keys := range r.cfg.OrderedKeys {
				if err := add(r.OrderedLatency(ctx, mode, w, keys)); err != nil {
					return res, err
				}
			}
		}
	}
	if want[ScenarioReceive] {
		if _, ok := r.st.(*pgStore); ok {
			if err := add(r.Receive(ctx)); err != nil {
				return res, err
			}
		} else {
			res.Notes = append(res.Notes, fmt.Sprintf("receive did not run: it is PostgreSQL's, and this is %s.", res.DatabaseName()))
		}
	}
	if want[ScenarioTenants] {
		if _, ok := r.st.(*pgStore); !ok {
			res.Notes = append(res.Notes, fmt.Sprintf("tenants did not run: tenant schemas are PostgreSQL's, and this is %s.", res.DatabaseName()))
		} else if err := add(r.Tenants(ctx)); err != nil {
			return res, err
		}
	}
	return res, nil
}

func (r *Runner) settings() Settings {
	s := Settings{
		Events: r.cfg.Events, BatchSize: r.cfg.BatchSize, Workers: r.cfg.Workers, MaxInFlight: r.cfg.MaxInFlight, Writers: r.cfg.Writers,
		PayloadSize: len(r.payload), DurationS: r.cfg.Duration.Seconds(), Rate: r.cfg.Rate,
		PollIntervalMS: float64(r.cfg.PollInterval) / float64(time.Millisecond), Sink: r.cfg.SinkName,
		Leases: string(r.cfg.Leases),
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

// cpuPerEvent is rep's machine CPU seconds per event, or 0 when either is
// unknown.
func cpuPerEvent(rep Report) float64 {
	if rep.Events <= 0 {
		return 0
	}
	return rep.MachineCPUBusyS / float64(rep.Events)
}

// cpuLimit is cores / (a + b): the events per second at which the
// machine's cores are all busy when each event costs a + b CPU seconds.
// It is 0 when a cost or the cores are unknown.
func cpuLimit(cores int, a, b float64) float64 {
	if cores <= 0 || a <= 0 || b <= 0 {
		return 0
	}
	return float64(cores) / (a + b)
}

// ratio is a/b, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// withScratch creates and migrates a scratch space (prepared for ordering
// when rep.Ordering says so), runs fn in it and drops it, also when fn
// fails or ctx is cancelled. It sets rep.Schema.
func (r *Runner) withScratch(ctx context.Context, rep *Report, fn func(s scratch) error) (err error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	s, err := r.st.create(ctx, r.cfg.SchemaPrefix+hex.EncodeToString(b[:]))
	if err != nil {
		return err
	}
	rep.Schema = s.label()
	defer func() {
		dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err = errors.Join(err, s.drop(dropCtx))
	}()
	if _, err := outboxmigrate.Migrate(ctx, s.database(), outboxmigrate.Config{Schema: s.schema(), Ordering: outbox.Ordering(rep.Ordering)}); err != nil {
		return err
	}
	return fn(s)
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
