package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cmd/outbox/internal/bench"
	"github.com/outboxkit/outbox/cmd/outbox/internal/dburl"
	"github.com/outboxkit/outbox/sink/webhooksink"
)

// benchFlagNames maps bench.Config fields to the flags that set them.
var benchFlagNames = map[string]string{
	"Events": "--events", "BatchSize": "--batch-size", "Workers": "--workers", "MaxInFlight": "--max-in-flight", "Writers": "--writers",
	"PayloadSize": "--payload-size", "Duration": "--duration", "Rate": "--rate", "PollInterval": "--poll-interval",
	"Retentions": "--retention", "Wakes": "--wake", "Capture": "--capture", "SchemaPrefix": "--schema-prefix", "OrderedKeys": "--ordered-keys",
	"Leases": "--leases",
}

// benchDiscardSink is the --sink value of the bench's own discarding sink.
const benchDiscardSink = "discard:"

func (a *app) benchCommand() *cobra.Command {
	var (
		cfg       bench.Config
		retention string
		wake      string
		sinkURL   string
		so        benchSinkOptions
		asJSON    bool
		keep      bool
		timeline  string
	)
	cmd := &cobra.Command{
		Use:   "bench [drain|sink|steady|latency|reference|reference-minimal|tenants|receive|all]...",
		Short: "Measure the relay and what the outbox costs on this database",
		Long: `bench measures the outbox on the database --database-url names: PostgreSQL,
SQLite or MySQL/MariaDB. Each scenario runs in scratch space of its own, named
--schema-prefix and a random suffix, created, migrated and removed again, also
on error or Ctrl-C; the database's own tables are never touched and --schema
does not apply:

  PostgreSQL     a scratch schema; needs CREATE on the database
  SQLite         a scratch file next to the URL's file (which is not opened),
                 or in a temporary directory when that one cannot be written
  MySQL/MariaDB  a scratch database; needs CREATE and DROP on the server

Scenarios (default: all, which leaves tenants out):

  reference  drain a pre-filled backlog of --events with a plain hand-written
             SQL loop (claim a batch with SKIP LOCKED, or BEGIN IMMEDIATE on
             SQLite; mark it in one statement)
  reference-minimal
             the minimal two-write loop (claim with a lease, then mark
             processed; durable commits) on a minimal table of its own:
             the yardstick for the relay's writes (PostgreSQL only; left
             out with a note elsewhere)
  sink       publish --events events straight through --sink, batch by
             batch from --workers loops, with no database: the sink's own
             limit (with discard:, the bench harness's)
  drain      drain the same backlog with the outbox relay; every drain report
             shows relay/reference from a reference run in the same mode;
             with sink and a --sink other than discard:, a discard: drain
             runs first and the drain shows drain/limit, the limit being
             the slower of that discard: drain and sink
  steady     --writers write flat out for --duration with the relay, and for
             half of it before and after without: the relay's cost to
             writers, and whether the backlog grows
  latency    writers at --rate events/s for --duration: commit→sink-ack
             latency p50/p95/p99/max, and the rate the writers reached
  tenants    schema-per-tenant outboxes served by one relay (PostgreSQL
             only; several minutes): 100 tenants sharing --events against
             one schema's --events (drain ratio); a quiet tenant's
             commit→sink p50/p99 while another drains --events; 1,000
             tenant schemas: the relay's statements/s while all are idle
             (20s), then p50/p99 while 10 of them write 100 events/s each
             for half of --duration
  receive    --events signed webhook requests, --writers in flight, from the
             webhook sink into outbox receive's handler storing into the
             inbox, against --writers hand-written INSERT … ON CONFLICT DO
             NOTHING loops storing the same messages: receive/reference;
             and against a hand-written net/http handler (signature check,
             the same INSERT) fed alike: receive/hand-written handler
             (PostgreSQL only; left out with a note elsewhere)

--retention all runs reference and drain once per retention mode; --wake all
runs steady and latency once per wake-up mode (poll: the relay's poll interval
only; listen: LISTEN/NOTIFY, PostgreSQL only; process: the writers call
Relay.Wake). Table sizes and dead tuples are what each database tells
cheaply: all of them on PostgreSQL, InnoDB's sizes on MySQL/MariaDB, the
file's size on SQLite.

The relay, the reference loop and the writers run in this process, so the
reported peak RSS is this process's. Absolute numbers drift between runs and
machines: compare the ratios taken in one run. Results go to stdout, as a
table or with --json as one JSON document; a line per phase goes to stderr.
Interrupted (Ctrl-C, SIGTERM), it drops its scratch schemas, reports the
scenarios that finished and exits 130.

With a broker --sink, the bench removes at the end (also after Ctrl-C) what
its sink created there and did not find before: the stream of a NATS URL's
create_stream, the Redis stream keys its events went to, the exchange of a
RabbitMQ URL's declare_exchange, the topics a Kafka URL's auto_create_topics
let it create. What existed before stays, with the messages the bench
published into it; --keep leaves everything.`,
		Example: "  outbox bench\n  outbox bench drain --retention all --json\n  outbox bench drain sink --sink nats://127.0.0.1:4222\n  outbox bench latency --rate 2000 --duration 30s --wake all\n" +
			"  outbox bench --database-url sqlite:///var/lib/app/app.db drain latency\n" +
			"  outbox bench --database-url mysql://root@127.0.0.1:3306/shop --wake process latency\n" +
			"  outbox bench tenants",
		Args: func(_ *cobra.Command, args []string) error {
			if _, err := bench.ParseScenarios(args); err != nil {
				return &usageError{err: err}
			}
			return nil
		},
		ValidArgs: []string{"drain", "sink", "steady", "latency", "reference", "reference-minimal", "receive", "all"},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			scenarios, err := bench.ParseScenarios(args)
			if err != nil {
				return &usageError{err: err}
			}
			if err := checkPositive(cmd, map[string]bool{
				"events": cfg.Events > 0, "batch-size": cfg.BatchSize > 0, "workers": cfg.Workers > 0, "max-in-flight": cfg.MaxInFlight > 0,
				"writers": cfg.Writers > 0, "payload-size": cfg.PayloadSize > 0, "duration": cfg.Duration > 0,
				"rate": cfg.Rate > 0, "poll-interval": cfg.PollInterval > 0, "sink-concurrency": so.concurrency > 0, "webhook-batch": so.webhookBatch > 0,
			}); err != nil {
				return err
			}
			if cfg.SchemaPrefix == "" {
				return usagef("invalid --schema-prefix: is empty")
			}
			if cfg.Retentions, err = bench.ParseRetentions(retention); err != nil {
				return usagef("invalid --retention: %v", err)
			}
			if cfg.Wakes, err = bench.ParseWakes(wake); err != nil {
				return usagef("invalid --wake: %v", err)
			}
			cfg.ReceiveBatch = so.webhookBatch
			if timeline != "" {
				if !slices.Contains(scenarios, bench.ScenarioLatency) {
					return usagef("--timeline records latency runs: name the latency scenario (or all)")
				}
				f, err := os.Create(timeline)
				if err != nil {
					return usagef("invalid --timeline: %v: name a file in a directory you can write", err)
				}
				defer func() {
					if err := f.Close(); err != nil {
						a.logger.Warn("closing the --timeline file failed", "error", err)
					}
				}()
				cfg.Timeline = f
			}
			if err := cfg.WithDefaults().Validate(); err != nil {
				return benchConfigError(err)
			}
			db, _, err := a.parseDatabase()
			if err != nil {
				return err
			}
			if db.Kind != dburl.KindPostgres && slices.ContainsFunc(args, func(a string) bool {
				return bench.Scenario(strings.ToLower(strings.TrimSpace(a))) == bench.ScenarioReferenceMinimal
			}) {
				return usagef("invalid scenario reference-minimal: it runs on PostgreSQL only, not on %s", dbKindName(db.Kind))
			}
			if db.Kind != dburl.KindPostgres && slices.ContainsFunc(args, func(a string) bool {
				return bench.Scenario(strings.ToLower(strings.TrimSpace(a))) == bench.ScenarioReceive
			}) {
				return usagef("invalid scenario receive: it runs on PostgreSQL only, not on %s", dbKindName(db.Kind))
			}
			if cfg.Leases == outbox.LeasesPartitions && db.Kind != dburl.KindPostgres {
				return usagef("invalid --leases partitions: owned partitions are PostgreSQL's, not %s's; use --leases auto or rows", dbKindName(db.Kind))
			}
			if wake == "all" && db.Kind != dburl.KindPostgres {
				// All the modes this database has: LISTEN is PostgreSQL's.
				cfg.Wakes = slices.DeleteFunc(cfg.Wakes, func(w bench.Wake) bool { return w == bench.WakeListen })
			}
			var cleanup *brokerCleanup
			if !keep {
				// Before the sink is opened, which may create a stream or
				// an exchange. A NATS URL's user name may be a token.
				registerSinkSecrets(a.redact, sinkURL, true)
				probeCtx, cancel := context.WithTimeout(cmd.Context(), connectTimeout)
				cleanup, err = prepareBenchCleanup(probeCtx, sinkURL)
				cancel()
				if err != nil {
					return errors.New(a.redact.String(err.Error()))
				}
			}
			sink, err := a.benchSink(cmd.Context(), sinkURL, so)
			if err != nil {
				return err
			}
			if sink != nil {
				defer func() {
					if cleanup != nil {
						a.runBenchCleanup(cmd.Context(), cleanup)
					}
					if err := closeSink(sink); err != nil {
						a.logger.Warn("closing the sink failed", "error", err)
					}
				}()
				cfg.Sink, cfg.SinkName = sink, describeSink(sinkURL, a.redact)
				if cleanup != nil && cleanup.wrap != nil {
					cfg.Sink = cleanup.wrap(sink)
				}
				if u, err := url.Parse(sinkURL); err == nil && (strings.EqualFold(u.Scheme, "http") || strings.EqualFold(u.Scheme, "https")) {
					// A webhook: each unordered drain runs the plain
					// claim/POST/mark loop beside it, at the same concurrency.
					cfg.PlainLoopURL, cfg.PlainLoopConcurrency = sinkURL, so.concurrency
				}
			}
			level := "warn" // the relay's start and stop lines would drown the report
			if cmd.Flags().Changed("log-level") {
				level = a.logLevel
			}
			if cfg.Logger, err = newLogger(a.stderr, a.logFormat, level, a.redact); err != nil {
				return err
			}
			// A line per phase, also off a terminal: a run takes minutes.
			cfg.Progress = func(msg string) { notef(a.stderr, "outbox bench: %s\n", msg) }

			ctx := cmd.Context()
			connectCtx, cancel := context.WithTimeout(ctx, connectTimeout)
			runner, err := bench.Open(connectCtx, db, cfg)
			cancel()
			if err != nil {
				return benchConfigError(err)
			}
			defer runner.Close()
			res, err := runner.Run(ctx, scenarios)
			if err != nil && ctx.Err() != nil {
				// Interrupted: report what finished, and exit as a shell
				// does for SIGINT.
				if len(res.Scenarios) == 0 {
					return &exitError{code: ExitInterrupted, err: fmt.Errorf("no scenario finished: %w", err)}
				}
				if werr := a.writeBenchResult(res, asJSON); werr != nil {
					return werr
				}
				return &exitError{code: ExitInterrupted, err: fmt.Errorf("%d finished scenarios reported; the rest did not run", len(res.Scenarios))}
			}
			if err != nil {
				return err
			}
			return a.writeBenchResult(res, asJSON)
		}),
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Events, "events", bench.EventsDefault, "events pre-filled for drain, reference and reference-minimal, and published by sink and receive")
	f.IntVar(&cfg.BatchSize, "batch-size", bench.BatchSizeDefault, "most events claimed and published at once")
	f.IntVar(&cfg.Workers, "workers", bench.WorkersDefault, "claim loops of the relay and of the reference loops")
	f.IntVar(&cfg.MaxInFlight, "max-in-flight", 0, fmt.Sprintf("batches the relay holds in flight (relay --max-in-flight), and publishes at once in sink (default %d, or --workers when larger)", outbox.MaxInFlightDefault))
	f.IntVar(&cfg.Writers, "writers", bench.WritersDefault, "writer goroutines in steady and latency; receive's requests in flight and insert loops")
	f.IntVar(&cfg.PayloadSize, "payload-size", bench.PayloadSizeDefault, "bytes of JSON payload per event")
	f.DurationVar(&cfg.Duration, "duration", bench.DurationDefault, "how long latency writes, and steady with the relay (steady also writes without it, half as long before and half after)")
	f.IntVar(&cfg.Rate, "rate", bench.RateDefault, "latency: the writers' total events per second")
	f.StringVar(&retention, "retention", string(outbox.RetainProcessed), "what the relay does with delivered events: processed, delete, archive, or all")
	f.IntSliceVar(&cfg.OrderedKeys, "ordered-keys", nil, "drain and latency: after each unordered run, an ordered one (relay --ordering aggregate) per count, with the events spread over that many aggregates, such as 10000,1000,10")
	f.StringVar((*string)(&cfg.Leases), "leases", string(outbox.LeasesAuto), "drain, steady, latency and tenants: how the relays share the events, as relay --leases: auto, rows or partitions (partitions: the unordered runs own partitions too; PostgreSQL)")
	f.StringVar(&wake, "wake", string(bench.WakePoll), "how steady's and latency's relay learns of new events: poll, listen (PostgreSQL only), process, or all")
	f.StringVar(&cfg.Capture, "capture", bench.CapturePoll, "poll (the table relay), logical (the relay --capture logical: steady and latency with wake logical, drain as a burst written after its slot exists; PostgreSQL with wal_level = logical), or all (both, side by side)")
	f.DurationVar(&cfg.PollInterval, "poll-interval", bench.PollIntervalDefault, "the relay's and the reference loop's wait after an empty claim")
	f.StringVar(&sinkURL, "sink", benchDiscardSink, "where events go: discard: (nothing), or any relay --sink URL to bench a broker")
	f.IntVar(&so.concurrency, "sink-concurrency", webhooksink.ConcurrencyDefault, "webhook --sink: requests in flight at once (relay --sink-concurrency)")
	f.IntVar(&so.webhookBatch, "webhook-batch", 1, "webhook --sink and receive: events per request, as a CloudEvents JSON batch above 1 (relay --webhook-batch)")
	f.StringVar(&cfg.SchemaPrefix, "schema-prefix", bench.SchemaPrefixDefault, "start of each scratch schema's, file's or database's name")
	f.BoolVar(&keep, "keep", false, "leave what the --sink created on its broker (a NATS stream of create_stream, Redis stream keys, a RabbitMQ exchange of declare_exchange, Kafka topics of auto_create_topics); by default the bench removes what did not exist before it")
	f.StringVar(&timeline, "timeline", "", "latency: write every measured event (wake, ordering, keys, event ID, commit time, latency in ms) to this CSV file")
	f.BoolVar(&asJSON, "json", false, "print the results as JSON")
	return cmd
}

// writeBenchResult prints res as a table or as JSON.
func (a *app) writeBenchResult(res bench.Result, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	return writeBenchText(a.stdout, res)
}

// benchSinkOptions are the bench's flags for a webhook --sink.
type benchSinkOptions struct {
	concurrency  int
	webhookBatch int
}

// benchSink opens the --sink for the bench: nil for discard: (the bench's
// own discarding sink), else the sink the relay command would open.
func (a *app) benchSink(ctx context.Context, raw string, so benchSinkOptions) (outbox.Sink, error) {
	if raw == "discard" || raw == benchDiscardSink {
		return nil, nil
	}
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" && !knownSinkScheme(u.Scheme) {
		names := []string{"discard"}
		for _, s := range sinkSchemes {
			names = append(names, s.name)
		}
		return nil, usagef("unknown sink scheme %q: use one of %s", u.Scheme, strings.Join(names, ", "))
	}
	secret := os.Getenv(EnvWebhookSecret)
	a.redact.add(secret)
	return openSink(ctx, raw, sinkOptions{
		Timeout: outbox.SinkTimeoutDefault, WebhookSecret: secret, Concurrency: so.concurrency, WebhookBatch: so.webhookBatch,
		Stdout: a.stdout, Logger: a.logger,
	}, a.redact)
}

func knownSinkScheme(scheme string) bool {
	for _, s := range sinkSchemes {
		if s.name == strings.ToLower(scheme) {
			return true
		}
	}
	return false
}

// dbKindName names a database kind as people write it.
func dbKindName(k dburl.Kind) string {
	switch k {
	case dburl.KindPostgres:
		return "PostgreSQL"
	case dburl.KindSQLite:
		return "SQLite"
	}
	return "MySQL/MariaDB"
}

// benchConfigError names the flag behind an invalid bench.Config field;
// any other error is returned as it is.
func benchConfigError(err error) error {
	var ce *bench.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	if name, ok := benchFlagNames[ce.Field]; ok {
		return usagef("invalid %s: %v", name, ce.Err)
	}
	return &usageError{err: err}
}

// writeBenchText writes res as a table per scenario.
func writeBenchText(w io.Writer, res bench.Result) error {
	s := res.Settings
	_, _ = fmt.Fprintf(w, "outbox bench on %s %s, %d CPUs: batch %d, %d relay loops, %d batches in flight, %d writers, payload %d B, poll %gms, sink %s\n",
		res.DatabaseName(), res.Server, res.CPUs, s.BatchSize, s.Workers, s.MaxInFlight, s.Writers, s.PayloadSize, s.PollIntervalMS, s.Sink)
	t := newTable(w, 2)
	for _, r := range res.Scenarios {
		title := string(r.Scenario)
		switch r.Scenario {
		case bench.ScenarioSink:
			title += "\tno database"
		case bench.ScenarioReceive:
			title += "\twebhook sink → outbox receive's handler → inbox"
		default:
			title += "\tretention " + r.Retention
		}
		if r.Sink != "" {
			title += ", sink " + r.Sink
		}
		if r.Wake != "" {
			title += ", wake " + string(r.Wake)
		}
		if r.Ordering != "" {
			title += fmt.Sprintf(", ordering %s, %s keys", r.Ordering, thousands(float64(r.Keys)))
		}
		t.row("\n%s\n", title)
		switch r.Scenario {
		case bench.ScenarioTenants:
			ts := r.TenantsStats
			t.row("  drain\t%d tenants × %s: %s events/s; one schema: %s events/s; ratio %.2f (target ≥ 0.8)\n", ts.Tenants,
				thousands(float64(ts.EventsPerTenant)), thousands(ts.TenantsEventsPerS), thousands(ts.SingleEventsPerS), ts.DrainRatio)
			t.row("  quiet tenant\tp50 %.1f ms, p99 %.1f ms (target ≤ 1000) while another drains %s (%d events)\n",
				ts.QuietP50MS, ts.QuietP99MS, thousands(float64(ts.FloodEvents)), ts.QuietCount)
			t.row("  %s tenants idle\t%.1f statements/s (target ≤ 100)\n", thousands(float64(ts.ManyTenants)), ts.IdleStatementsPerS)
			t.row("  %d active\tp50 %.1f ms, p99 %.1f ms (target ≤ 1000) at %d events/s each (%d events)\n", ts.ActiveTenants,
				ts.ActiveP50MS, ts.ActiveP99MS, ts.ActiveRatePerTenant, ts.ActiveCount)
			continue
		case bench.ScenarioLatency:
			t.row("  writers\t%s of %s events/s (%s events in %.2fs)\n", thousands(r.EventsPerS), thousands(r.TargetEventsPerS),
				thousands(float64(r.Events)), r.Seconds)
			t.row("  commit→ack\tp50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms (%s events, after %d warm-up)\n",
				r.P50MS, r.P95MS, r.P99MS, r.MaxMS, thousands(float64(r.Count)), r.WarmupEvents)
		case bench.ScenarioSteady:
			t.row("  writer tps\t%s without the relay, %s with it: %.2f×\n", thousands(r.WriterTPSWithoutRelay),
				thousands(r.WriterTPSWithRelay), r.WriterTPSRatio)
			t.row("  relay events/s\t%s\n", thousands(r.EventsPerS))
			grew := "not growing"
			if r.BacklogGrew {
				grew = "GROWING: the relay did not keep up"
			}
			t.row("  backlog\t%s halfway, %s at the end (%s)\n", thousands(float64(r.BacklogMid)), thousands(float64(r.BacklogEnd)), grew)
		default:
			t.row("  events/s\t%s (%s events in %.2fs)\n", thousands(r.EventsPerS), thousands(float64(r.Events)), r.Seconds)
			if r.DrainStats != nil && r.Scenario == bench.ScenarioReceive {
				t.row("  receive/reference\t%.2f× (hand-written INSERT … ON CONFLICT loop %s events/s)\n", r.RatioToReference, thousands(r.ReferenceEventsPerS))
				t.row("  receive/hand-written handler\t%.2f× (net/http handler with the same INSERT %s events/s)\n", r.RatioToHandHTTP, thousands(r.HandHTTPEventsPerS))
			} else if r.DrainStats != nil {
				t.row("  relay/reference\t%.2f× (reference %s events/s)\n", r.RatioToReference, thousands(r.ReferenceEventsPerS))
				if r.RatioToUnordered > 0 {
					t.row("  ordered/unordered\t%.2f×\n", r.RatioToUnordered)
				}
				if r.LimitEventsPerS > 0 {
					t.row("  drain/limit\t%.2f× (limit %s events/s: the slower of the discard: drain %s and sink %s)\n", r.RatioToLimit,
						thousands(r.LimitEventsPerS), thousands(r.DiscardDrainEventsPerS), thousands(r.SinkEventsPerS))
				}
				if r.CPULimitEventsPerS > 0 {
					t.row("  drain/CPU limit\t%.2f× (limit %s events/s: %d cores ÷ (discard: drain %.1f µs + sink %.1f µs of machine CPU per event))\n",
						r.RatioToCPULimit, thousands(r.CPULimitEventsPerS), res.MachineCPUs, r.DiscardDrainCPUSPerEvent*1e6, r.SinkCPUSPerEvent*1e6)
				}
				if r.PlainLoopEventsPerS > 0 {
					t.row("  drain/plain loop\t%.2f× (claim/POST/mark loop %s events/s)\n", r.RatioToPlainLoop, thousands(r.PlainLoopEventsPerS))
				}
			}
		}
		if r.Duplicates > 0 {
			t.row("  duplicates\t%d\n", r.Duplicates)
		}
		if r.Scenario != bench.ScenarioSink && r.Scenario != bench.ScenarioReceive {
			writeTableSizes(t, res.Database, r)
		}
		if r.MachineCPUSPerEvent > 0 {
			t.row("  machine CPU\t%.1f µs/event (%.2f s busy over all %d cores: the whole machine, not only this process)\n",
				r.MachineCPUSPerEvent*1e6, r.MachineCPUBusyS, res.MachineCPUs)
		}
		t.row("  peak RSS\t%s\n", bytesize(r.RSSPeakBytes))
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, _ = fmt.Fprintln(w)
	for _, n := range res.Notes {
		_, _ = fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// writeTableSizes writes what the database told of the outbox table's
// storage: on SQLite the whole file's size only.
func writeTableSizes(t *table, database string, r bench.Report) {
	b, a := r.Table.Before, r.Table.After
	sizes := bytesize(b.TotalBytes) + " → " + bytesize(a.TotalBytes)
	if b.IndexBytes != nil && a.IndexBytes != nil {
		sizes += ", indexes " + bytesize(*b.IndexBytes) + " → " + bytesize(*a.IndexBytes)
	}
	if database == "sqlite" {
		t.row("  database file\t%s\n", sizes)
	} else {
		t.row("  table\t%s\n", sizes)
	}
	if r.Retention == string(outbox.RetainArchive) && b.ArchiveTotalBytes != nil && a.ArchiveTotalBytes != nil {
		t.row("  archive\t%s → %s\n", bytesize(*b.ArchiveTotalBytes), bytesize(*a.ArchiveTotalBytes))
	}
	if b.LiveTuples != nil && a.LiveTuples != nil && b.DeadTuples != nil && a.DeadTuples != nil {
		t.row("  live/dead tuples\t%d/%d → %d/%d\n", *b.LiveTuples, *b.DeadTuples, *a.LiveTuples, *a.DeadTuples)
	}
}

// thousands formats v rounded to an integer with thousands separators.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// bytesize formats n bytes in binary units.
func bytesize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, suffix := float64(n)/unit, "KiB"
	for _, s := range []string{"MiB", "GiB", "TiB"} {
		if v < unit {
			break
		}
		v, suffix = v/unit, s
	}
	return fmt.Sprintf("%.1f %s", v, suffix)
}
