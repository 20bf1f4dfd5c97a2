package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cmd/outbox/internal/dburl"
	"github.com/outboxkit/outbox/outboxcdc"
	"github.com/outboxkit/outbox/outboxprom"
	"github.com/outboxkit/outbox/route"
	"github.com/outboxkit/outbox/sink/webhooksink"
)

// EnvSinkURL is the relay's --sink when the flag is not given: a sink URL
// with credentials stays out of the process's arguments.
const EnvSinkURL = "OUTBOX_SINK"

// relayFlagNames maps RelayConfig fields to the flags that set them, so a
// configuration error names what the operator typed (or the config file
// key and line).
var relayFlagNames = map[string]string{
	"BatchSize": "batch-size", "Workers": "workers", "PollInterval": "poll-interval",
	"Lease": "lease", "SinkTimeout": "sink-timeout", "MaxAttempts": "max-attempts",
	"BackoffBase": "backoff-base", "BackoffMax": "backoff-max", "RelayID": "relay-id",
	"Sink": "sink", "ShutdownTimeout": "shutdown-timeout", "EventTypes": "event-types",
	"Retention": "retention", "MaxBatchBytes": "max-batch-bytes",
	"MaxInFlight": "max-in-flight", "MaxInFlightBytes": "max-in-flight-bytes", "DBTimeout": "db-timeout", "Listen": "listen",
	"ProbeInterval": "probe-interval", "ProbeIntervalMax": "probe-interval-max", "SummaryInterval": "summary-interval",
	"HeartbeatInterval": "heartbeat-interval", "Ordering": "ordering", "OrderedFailure": "ordered-failure",
	"Leases": "leases",
}

// relayFlags are the relay command's flags, before the config file and the
// environment fill what they leave unset.
type relayFlags struct {
	sinkURL    string
	cfg        outbox.RelayConfig
	retention  string
	ordering   string
	failure    string // --ordered-failure
	leases     string
	capture    string // --capture: poll or logical
	group      string // --capture-group
	maxSlotLag int    // --max-slot-lag, bytes
	eventTypes []string
	route      string
	routeRules []string
	fileRules  []route.Rule // routing.rules of the config file, unless --route-rule is given
	so         sinkOptions
	obs        observability
	tenants    tenantFlags
}

func (a *app) relayCommand() *cobra.Command {
	var rf relayFlags
	cmd := &cobra.Command{
		Use:   "relay --sink URL",
		Short: "Publish pending events to a sink until stopped",
		Long: `relay claims due pending events in batches under a lease, publishes them to
the sink and marks them delivered (kept as processed, deleted or archived, as
--retention says); failed publishes are retried with exponential backoff and
dead-lettered (status failed) after --max-attempts. After a short batch it
claims again 5ms later; after an empty one it waits --poll-interval, or, with
--listen on PostgreSQL, until a writer's NOTIFY.
Any number of relays may serve one table; relays with disjoint --event-types
serve different sinks from one table.

The --sink URL's scheme picks the sink (docs/brokers.md has every option):
  stdout:                    JSON lines on standard output
  http://… https://…         CloudEvents webhook (HTTP POST), signed with --webhook-secret
  nats://host:4222?stream=S  NATS JetStream, Nats-Msg-Id = event ID for dedup
  kafka://host:9092[,host…]  Kafka, idempotent producer, key = aggregate ID
  amqp[s]://user:pass@host/vhost?exchange=X   RabbitMQ with publisher confirms
  redis[s]://[:pass@]host:6379/0              Redis Streams (XADD)
  mqtt[s]://[user:pass@]host:1883             MQTT 3.1.1, QoS 1

Broker sinks send each event to a destination (subject, topic, routing key,
stream) from --route, or the first --route-rule whose pattern matches the
event type; an event's outbox_topic header overrides both.

With --purge-after (and --purge-failed-after) or --dead-letter-retry, one relay
of the fleet at a time, the holder of a lease row in outbox_leases, also
deletes old events every --purge-interval and sends dead-lettered events back
to pending on a slow schedule (docs/operations.md, Retention and Slow retry).

--config FILE reads these settings from a YAML file; a flag given on the
command line wins over an environment variable, which wins over the file.

It runs until SIGINT or SIGTERM, then stops claiming, lets in-flight batches
finish (events still publishing after --shutdown-timeout are released to
pending without spending an attempt) and exits 0, at most a few seconds
after --shutdown-timeout even when the database is down or the sink hangs:
what it could not release stays leased until the lease ends, and is logged. On PostgreSQL its
connections show in pg_stat_activity as application_name
outbox-relay:<relay-id>.`,
		Example: `  outbox relay --sink stdout:
  outbox relay --sink https://example.com/hooks/outbox --webhook-secret "$SECRET"
  outbox relay --sink 'nats://127.0.0.1:4222?stream=ORDERS' --route 'orders.{event_type}' --event-types 'order.*'
  outbox relay --sink amqp://guest:guest@127.0.0.1:5672/?exchange=events --route-rule 'user.*=users.{event_type}'
  outbox relay --config /etc/outbox/relay.yaml --workers 4`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error { return a.runRelayCommand(cmd, &rf) }),
	}
	f := cmd.Flags()
	f.StringVar(&rf.sinkURL, "sink", "", "where to publish: stdout:, http(s)://…, nats://…, kafka://…, amqp(s)://…, redis(s)://… or mqtt(s)://… (default $"+EnvSinkURL+")")
	f.IntVar(&rf.cfg.BatchSize, "batch-size", outbox.BatchSizeDefault, "most events claimed and published at once")
	f.IntVar(&rf.cfg.MaxBatchBytes, "max-batch-bytes", 0, "most payload and header bytes (as stored) claimed at once, so a batch of large payloads cannot exhaust memory; a claim always takes its first event; 0 for no bound")
	f.IntVar(&rf.cfg.Workers, "workers", outbox.WorkersDefault, "claim-publish-mark loops running at once")
	f.IntVar(&rf.cfg.MaxInFlight, "max-in-flight", 0, fmt.Sprintf("most batches held at once, claimed and not yet marked: a loop claims its next batch while the sink publishes the last one; at least --workers, 1 with one worker for a strict claim-publish-mark loop (default %d, or --workers when larger)", outbox.MaxInFlightDefault))
	f.IntVar(&rf.cfg.MaxInFlightBytes, "max-in-flight-bytes", outbox.MaxInFlightBytesDefault, "most payload and header bytes (as stored) of the batches in flight: a loop claims only while they hold less")
	f.DurationVar(&rf.cfg.PollInterval, "poll-interval", outbox.PollIntervalDefault, "wait after an empty claim")
	f.DurationVar(&rf.cfg.Lease, "lease", outbox.LeaseDefault, "how long a claim holds its events before another relay may take them over")
	f.DurationVar(&rf.cfg.SinkTimeout, "sink-timeout", outbox.SinkTimeoutDefault, "bound on one publish, shorter than --lease; unset, half the lease when that is shorter")
	f.IntVar(&rf.cfg.MaxAttempts, "max-attempts", outbox.MaxAttemptsDefault, "failed publishes before an event is dead-lettered (status failed)")
	f.DurationVar(&rf.cfg.BackoffBase, "backoff-base", outbox.BackoffBaseDefault, "retry delay base: the n-th failure waits backoff-base·2^n (with jitter)")
	f.DurationVar(&rf.cfg.BackoffMax, "backoff-max", outbox.BackoffMaxDefault, "longest retry delay")
	f.DurationVar(&rf.cfg.ShutdownTimeout, "shutdown-timeout", 0, "on SIGTERM, how long in-flight batches may finish before they are released (default sink timeout + 5s, within the lease)")
	f.DurationVar(&rf.cfg.DBTimeout, "db-timeout", 0, "bound on each database call (a claim, a mark, a lease rescue), so a connection that went silent is given up and replaced; below --lease (default 10s, or half the lease when that is shorter)")
	f.StringVar(&rf.cfg.RelayID, "relay-id", "", "this relay's name in locked_by, logs and application_name (default hostname:pid)")
	f.StringSliceVar(&rf.eventTypes, "event-types", nil, "relay only events whose type matches one of these patterns, * matching any run of characters, such as 'order.*,user.created' (default every type)")
	f.StringVar(&rf.retention, "retention", string(outbox.RetainProcessed), "what happens to a delivered event's row: processed (kept), delete, or archive (moved to outbox_events_archive)")
	f.StringVar(&rf.ordering, "ordering", string(outbox.OrderingNone), "none, or aggregate: per aggregate (aggregate_type, aggregate_id), the sink's first acknowledgements follow the order the events were written in, across any number of relays")
	f.StringVar(&rf.failure, "ordered-failure", string(outbox.OrderedFailureBlock), "with --ordering aggregate, what an aggregate's later events do once its first unfinished event is dead-lettered: block (wait, unsent, until it is retried) or skip (go on)")
	f.StringVar(&rf.leases, "leases", string(outbox.LeasesAuto), "how relays share the events: auto (owned partitions for --ordering aggregate on PostgreSQL, row leases otherwise), rows (a lease per event, written when claimed and again when settled), or partitions (PostgreSQL: each relay owns partitions of keys and writes each event once; every relay of a schema must use the same; docs/ordering.md)")
	f.StringVar(&rf.capture, "capture", capturePoll, "how the relay finds new events: poll (claim them from the table) or logical (stream committed inserts from a logical replication slot, PostgreSQL with wal_level = logical; failed publishes are retried from the table; docs/cdc.md)")
	f.StringVar(&rf.group, "capture-group", outboxcdc.GroupDefault, "with --capture logical, the relay group: the slot and the publication are named outbox_<schema>_<group>; relays of one group share the slot, one streaming, the others standing by")
	f.IntVar(&rf.maxSlotLag, "max-slot-lag", int(outboxcdc.MaxSlotLagDefault), "with --capture logical, the WAL in bytes the slot may retain on the server before the relay warns loudly (the slot keeps WAL until the relay confirms it)")
	f.BoolVar(&rf.cfg.Listen, "listen", false, "claim as soon as a writer commits, woken by PostgreSQL NOTIFY (writers set WriterConfig.NotifyInterval), instead of polling every --poll-interval")
	f.StringVar(&rf.route, "route", route.Default, "broker sinks: the template of each event's subject, topic, routing key or stream; placeholders {event_type}, {aggregate_type}, {aggregate_id}, {id}, {header.NAME}, with {name|fallback}")
	f.StringArrayVar(&rf.routeRules, "route-rule", nil, "broker sinks: 'PATTERN=TEMPLATE' routes events whose type matches PATTERN to TEMPLATE instead of --route; repeatable, the first match wins")
	f.StringVar(&rf.so.WebhookSecret, "webhook-secret", "", "webhook: secret that signs each request (default $"+EnvWebhookSecret+")")
	f.StringVar(&rf.so.WebhookCA, "webhook-ca", "", "https webhook: PEM file of the CA that signed the endpoint's certificate, trusted instead of the system roots")
	f.StringVar(&rf.so.WebhookCert, "webhook-cert", "", "https webhook: PEM client certificate to present, for endpoints that require one (with --webhook-key)")
	f.StringVar(&rf.so.WebhookKey, "webhook-key", "", "https webhook: PEM private key of --webhook-cert")
	f.IntVar(&rf.so.Concurrency, "sink-concurrency", webhooksink.ConcurrencyDefault, "webhook: requests in flight at once")
	f.IntVar(&rf.so.WebhookBatch, "webhook-batch", 1, "webhook: events per request; above 1, each request is a CloudEvents JSON batch (application/cloudevents-batch+json), for endpoints that accept it")
	f.BoolVar(&rf.so.WebhookDenyPrivate, "webhook-deny-private", false, "webhook: refuse to connect to private, loopback, link-local, CGNAT and cloud metadata addresses, checked on each dialed address (for tenant-supplied URLs); such events are dead-lettered")
	f.StringSliceVar(&rf.so.WebhookAllowNetworks, "webhook-allow-network", nil, "webhook: with --webhook-deny-private, a network (CIDR or address) reached even so, such as 10.1.2.0/24; repeatable")
	f.StringVar(&rf.so.Source, "source", "", "webhook and broker sinks: the CloudEvents source attribute of each event (default "+webhooksink.SourceDefault+")")
	addScheduleFlags(f, &rf.cfg)
	f.DurationVar(&rf.cfg.ProbeInterval, "probe-interval", outbox.ProbeIntervalDefault, "when the sink is unreachable (connection refused, DNS, TLS handshake), how long until the first probe; no attempts are spent while it is down")
	f.DurationVar(&rf.cfg.ProbeIntervalMax, "probe-interval-max", outbox.ProbeIntervalMaxDefault, "longest wait between probes of an unreachable sink (the wait doubles after each failed probe)")
	f.DurationVar(&rf.cfg.SummaryInterval, "summary-interval", outbox.SummaryIntervalDefault, "how often to log an INFO summary of published, retried and dead-lettered events; 0 for none")
	f.DurationVar(&rf.cfg.HeartbeatInterval, "heartbeat-interval", outbox.HeartbeatIntervalDefault, "how often to renew the relay's row in outbox_relays, which lists running relays in stats and on the dashboard (stale after three missed); 0 for none")
	rf.tenants.addFlags(f, "serve every tenant schema")
	f.DurationVar(&rf.tenants.refresh, "tenant-refresh", outbox.TenantRefreshDefault, "with --tenant-schemas or --tenant-query, how often to discover tenants again: a new tenant is served, a removed one stopped, within it")
	f.StringVar(&rf.tenants.metrics, "tenant-metrics", string(outboxprom.TenantPerTenant), "with --metrics-addr and tenants: per-tenant (series labelled by schema, about 130 per tenant) or aggregate (one set of series for all tenants of a database, for fleets of thousands)")
	rf.obs.addFlags(f)
	return cmd
}

// runRelayCommand merges the flags, the environment and the config file,
// opens the sink and runs the relay.
func (a *app) runRelayCommand(cmd *cobra.Command, rf *relayFlags) error {
	if err := checkPositive(cmd, map[string]bool{
		"batch-size": rf.cfg.BatchSize > 0, "workers": rf.cfg.Workers > 0, "max-in-flight": rf.cfg.MaxInFlight > 0,
		"max-in-flight-bytes": rf.cfg.MaxInFlightBytes > 0, "poll-interval": rf.cfg.PollInterval > 0,
		"lease": rf.cfg.Lease > 0, "sink-timeout": rf.cfg.SinkTimeout > 0, "max-attempts": rf.cfg.MaxAttempts > 0,
		"backoff-base": rf.cfg.BackoffBase > 0, "backoff-max": rf.cfg.BackoffMax > 0, "sink-concurrency": rf.so.Concurrency > 0, "webhook-batch": rf.so.WebhookBatch > 0,
		"shutdown-timeout": rf.cfg.ShutdownTimeout > 0, "db-timeout": rf.cfg.DBTimeout > 0,
		"purge-interval": rf.cfg.PurgeInterval > 0, "dead-letter-retries": rf.cfg.DeadLetterRetries > 0, "schedule-lease": rf.cfg.ScheduleLease > 0,
		"probe-interval": rf.cfg.ProbeInterval > 0, "probe-interval-max": rf.cfg.ProbeIntervalMax > 0,
	}); err != nil {
		return err
	}
	if rf.cfg.SummaryInterval < 0 {
		return usagef("invalid --summary-interval %v: use a positive duration, or 0 for no summary", rf.cfg.SummaryInterval)
	}
	if rf.cfg.HeartbeatInterval < 0 {
		return usagef("invalid --heartbeat-interval %v: use a positive duration, or 0 for no heartbeat", rf.cfg.HeartbeatInterval)
	}
	for _, flag := range []string{"webhook-ca", "webhook-cert", "webhook-key"} {
		// "$CA_FILE" of an unset variable must not quietly mean none.
		if f := cmd.Flags().Lookup(flag); f.Changed && f.Value.String() == "" {
			return usagef("invalid --%s: is empty: name a PEM file, or remove the flag", flag)
		}
	}
	// setup has read --config, the global flag, with every relay key.
	m := &merger{flags: cmd.Flags(), file: a.file, origins: map[string]string{}}
	if !cmd.Flags().Changed("sink-timeout") {
		// Leave it to the library unless the file sets it: the default,
		// or half the lease when that is shorter.
		rf.cfg.SinkTimeout = 0
	}
	if err := m.apply(a, rf); err != nil {
		return err
	}
	if !m.given("probe-interval-max") {
		// The library's default: 30s, or --probe-interval when longer.
		rf.cfg.ProbeIntervalMax = 0
	}
	if rf.cfg.SummaryInterval == 0 {
		rf.cfg.SummaryInterval = -1 // off
	}
	if rf.cfg.HeartbeatInterval == 0 {
		rf.cfg.HeartbeatInterval = -1 // off
	}
	if rf.sinkURL == "" {
		return usagef("missing --sink: say where to publish, such as --sink stdout: or --sink nats://127.0.0.1:4222 (or set $%s, or sink.url in --config)", EnvSinkURL)
	}
	if err := rf.obs.check(a.redact, m.given("otel")); err != nil {
		return err
	}
	a.redact.add(rf.so.WebhookSecret)
	retention, err := outbox.ParseRetention(rf.retention)
	if err != nil {
		return usagef("invalid %s %q: use processed, delete or archive", m.name("retention"), clip(rf.retention))
	}
	ordering, err := outbox.ParseOrdering(rf.ordering)
	if err != nil {
		return usagef("invalid %s %q: use none or aggregate", m.name("ordering"), clip(rf.ordering))
	}
	failure, err := outbox.ParseOrderedFailure(rf.failure)
	if err != nil {
		return usagef("invalid %s %q: use block or skip", m.name("ordered-failure"), clip(rf.failure))
	}
	if failure == outbox.OrderedFailureSkip && ordering != outbox.OrderingAggregate {
		return usagef("%s skip needs --ordering aggregate", m.name("ordered-failure"))
	}
	leases, err := outbox.ParseLeases(rf.leases)
	if err != nil {
		return usagef("invalid %s %q: use auto, rows or partitions", m.name("leases"), clip(rf.leases))
	}
	if leases == outbox.LeasesPartitions && len(rf.eventTypes) > 0 {
		return usagef("%s partitions cannot be used with %s: a relay owns every event of its partitions, so relays split by type would leave each other's events unsent; use --leases rows with an event type filter",
			m.name("leases"), m.name("event-types"))
	}
	if err := checkCapture(m, rf, ordering); err != nil {
		return err
	}
	router, err := m.router(rf)
	if err != nil {
		return err
	}
	var (
		db    *dburl.Config
		rawDB string
		multi []tenantDatabase // several databases, with a tenant flag
	)
	if urls := a.tenantDatabaseURLs(&rf.tenants); len(urls) > 1 {
		if multi, err = a.tenantDatabases(urls, m); err != nil {
			return err
		}
		db = &dburl.Config{Kind: dburl.KindPostgres}
	} else if db, rawDB, err = a.parseDatabase(); err != nil {
		return err
	}
	pc := db.Postgres // nil for SQLite and MySQL/MariaDB, and for several databases
	if leases == outbox.LeasesPartitions {
		kind := db.Kind
		for _, d := range multi {
			if d.pc == nil {
				kind = dburl.KindMySQL
			}
		}
		if kind != dburl.KindPostgres {
			return usagef("invalid %s partitions: owned partitions are PostgreSQL's (schema migration 8); on %s use --leases auto or rows", m.name("leases"), kind)
		}
	}
	if rf.capture == captureLogical && (rf.tenants.on() || len(multi) > 0) {
		return usagef("%s cannot be used with --capture logical yet: run a capture relay per schema", rf.tenants.flag(m))
	}
	if rf.capture == captureLogical && pc == nil {
		return usagef("invalid %s logical: change-data capture reads PostgreSQL's logical replication; on %s use --capture poll", m.name("capture"), db.Kind)
	}
	cfg := rf.cfg
	cfg.Retention, cfg.EventTypes = retention, rf.eventTypes
	cfg.Ordering, cfg.OrderedFailure, cfg.Leases = ordering, failure, leases
	cfg.Schema, cfg.Logger, cfg.PgBouncer = a.schema, a.logger, a.pgbouncer
	if cfg.RelayID == "" {
		cfg.RelayID = outbox.DefaultRelayID()
	}
	cfg = cfg.WithDefaults()
	so := rf.so
	so.Timeout, so.Stdout, so.Logger, so.Router, so.given, so.name = cfg.SinkTimeout, a.stdout, a.logger, router, m.sinkOptionsGiven(), m.name
	desc := describeSink(rf.sinkURL, a.redact)
	sink, err := openSink(cmd.Context(), rf.sinkURL, so, a.redact)
	if err != nil {
		return describeSinkError(desc, err)
	}
	defer func() {
		if err := closeSink(sink); err != nil {
			a.logger.Warn("closing the sink failed", "error", err)
		}
	}()
	cfg.Sink, cfg.SinkName = sink, desc
	if version != "" {
		cfg.Version = version
	}
	if err := cfg.Validate(); err != nil {
		return m.relayConfigError(err)
	}
	rf.obs.target = sinkTracingTarget(rf.sinkURL, router)
	if rf.capture == captureLogical {
		return a.runCaptureRelay(cmd.Context(), pc, cfg, desc, &rf.obs, rf.group, int64(rf.maxSlotLag))
	}
	if rf.tenants.on() {
		if err := a.checkTenantFlags(m, &rf.tenants, db.Kind); err != nil {
			return err
		}
		if _, err := outboxprom.ParseTenantMode(rf.tenants.metrics); err != nil {
			return usagef("invalid %s %q: use per-tenant or aggregate", m.name("tenant-metrics"), clip(rf.tenants.metrics))
		}
		if multi == nil {
			multi = []tenantDatabase{{pc: pc, raw: rawDB}}
		}
		return a.runTenants(cmd.Context(), multi, cfg, desc, &rf.tenants, &rf.obs)
	}
	return a.runRelay(cmd.Context(), rawDB, pc, cfg, desc, &rf.obs)
}

// runRelay connects a pool of the relay's own and runs the relay until ctx
// ends, then stops it gracefully.
func (a *app) runRelay(ctx context.Context, rawDB string, pc *pgxpool.Config, cfg outbox.RelayConfig, sinkName string, obs *observability) error {
	// One connection per batch in flight (a claim loop claims, and each
	// batch marks, on one), one for the lease rescue, one spare, and one
	// held in LISTEN.
	conns := cfg.WithDefaults().MaxInFlight + 2
	if cfg.Listen {
		conns++
	}
	var db outbox.Database
	var pgPool *pgxpool.Pool
	appName := ""
	if pc != nil {
		outbox.ConfigureRelayPool(pc, cfg.RelayID)
		if cfg.PgBouncer {
			outbox.ConfigurePgBouncer(pc)
		}
		appName = pc.ConnConfig.RuntimeParams["application_name"]
		pc.MaxConns = max(pc.MaxConns, int32(min(conns, 1<<20)))
		pool, err := a.open(ctx, pc)
		if err != nil {
			return err
		}
		defer pool.Close()
		db, pgPool = outbox.Postgres(pool), pool
	} else {
		sqlDB, closer, kind, err := dburl.Open(ctx, rawDB, dburl.Options{RelayID: cfg.RelayID, MaxConns: conns, ConnectTimeout: connectTimeout})
		if err != nil {
			return err
		}
		defer func() { _ = closer.Close() }()
		if cfg.Listen {
			a.logger.Warn("--listen has no effect on " + string(kind) + ": only PostgreSQL has LISTEN/NOTIFY; the relay polls")
		}
		db = sqlDB
	}
	if err := outbox.NewManager(db, outbox.ManagerConfig{Schema: cfg.Schema}).Ping(ctx); err != nil {
		return a.tableError(err)
	}
	if pgPool != nil {
		a.warnCaptureSlots(ctx, pgPool, cfg.Schema, cfg.EventTypes)
	}
	observers, err := a.startObservers(ctx, obs, db, &cfg, sinkName)
	if err != nil {
		return err
	}
	defer observers.stop()
	relay, err := outbox.NewRelay(db, cfg)
	if err != nil {
		return relayConfigError(err)
	}
	observers.setRelay(relay)
	attrs := []any{"sink", sinkName, "relay_id", cfg.RelayID, "retention", string(cfg.Retention), "listen", cfg.Listen}
	if cfg.Ordering == outbox.OrderingAggregate {
		attrs = append(attrs, "ordering", string(cfg.Ordering), "ordered_failure", string(cfg.OrderedFailure))
	}
	if cfg.Leases != outbox.LeasesAuto {
		attrs = append(attrs, "leases", string(cfg.Leases))
	}
	if cfg.PgBouncer {
		attrs = append(attrs, "pgbouncer", true)
	}
	if appName != "" {
		attrs = append(attrs, "application_name", appName)
	}
	if len(cfg.EventTypes) > 0 {
		attrs = append(attrs, "event_types", cfg.EventTypes)
	}
	a.logger.Info("relay publishing to sink", attrs...)
	// The first SIGINT or SIGTERM ends ctx (a second one kills the
	// process): say what happens now, and for how long at most, before the
	// relay starts stopping, so the line comes before "relay stopped".
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	stopNote := context.AfterFunc(ctx, func() {
		a.logger.Info("shutdown signal received; finishing in-flight batches, up to --shutdown-timeout",
			"shutdown_timeout", cfg.ShutdownTimeout)
		stopRun()
	})
	defer stopNote()
	return relay.Run(runCtx)
}

// merger fills the relay settings the command line leaves unset from the
// environment and then the config file, and remembers where each value
// came from so errors name it.
type merger struct {
	flags   *pflag.FlagSet
	file    *fileConfig // nil without --config
	origins map[string]string
}

// fromFile returns the file's value for flag unless the flag was given.
func (m *merger) fromFile(flag string) (fileValue, bool) {
	if m.flags.Changed(flag) {
		return fileValue{}, false
	}
	v, ok := m.file.get(flag)
	if ok {
		m.origins[flag] = v.origin()
	}
	return v, ok
}

// fromEnvOrFile returns the value for flag from env or else the file,
// unless the flag was given.
func (m *merger) fromEnvOrFile(flag, env string) (string, bool) {
	if m.flags.Changed(flag) {
		return "", false
	}
	if v := os.Getenv(env); v != "" {
		m.origins[flag] = "$" + env
		return v, true
	}
	if v, ok := m.fromFile(flag); ok {
		return v.str, true
	}
	return "", false
}

// name says how the operator set flag: the flag, an environment variable
// or a config file key with its line.
func (m *merger) name(flag string) string {
	if o, ok := m.origins[flag]; ok {
		return o
	}
	return "--" + flag
}

// given reports whether the operator set flag, on the command line or in
// the file.
func (m *merger) given(flag string) bool {
	if m.flags.Changed(flag) {
		return true
	}
	_, ok := m.origins[flag]
	return ok
}

// apply fills rf from the environment and the file where no flag was given.
func (m *merger) apply(a *app, rf *relayFlags) error {
	if v, ok := m.fromEnvOrFile("sink", EnvSinkURL); ok {
		rf.sinkURL = v
	}
	if v, ok := m.fromEnvOrFile("webhook-secret", EnvWebhookSecret); ok {
		rf.so.WebhookSecret = v
	}
	if v, ok := m.fromEnvOrFile("alert-webhook", EnvAlertWebhook); ok {
		rf.obs.alertWebhook = v
	}
	strs := map[string]*string{
		"relay-id": &rf.cfg.RelayID, "retention": &rf.retention, "source": &rf.so.Source,
		"capture": &rf.capture, "capture-group": &rf.group,
		"ordering": &rf.ordering, "ordered-failure": &rf.failure, "leases": &rf.leases,
		"route": &rf.route, "metrics-addr": &rf.obs.metricsAddr,
		"webhook-ca": &rf.so.WebhookCA, "webhook-cert": &rf.so.WebhookCert, "webhook-key": &rf.so.WebhookKey,
	}
	ints := map[string]*int{
		"batch-size": &rf.cfg.BatchSize, "workers": &rf.cfg.Workers, "max-attempts": &rf.cfg.MaxAttempts,
		"max-batch-bytes": &rf.cfg.MaxBatchBytes, "max-in-flight": &rf.cfg.MaxInFlight,
		"max-in-flight-bytes": &rf.cfg.MaxInFlightBytes, "max-slot-lag": &rf.maxSlotLag,
		"sink-concurrency": &rf.so.Concurrency, "webhook-batch": &rf.so.WebhookBatch, "dead-letter-retries": &rf.cfg.DeadLetterRetries,
	}
	durs := map[string]*time.Duration{
		"poll-interval": &rf.cfg.PollInterval, "lease": &rf.cfg.Lease, "sink-timeout": &rf.cfg.SinkTimeout,
		"shutdown-timeout": &rf.cfg.ShutdownTimeout, "db-timeout": &rf.cfg.DBTimeout, "backoff-base": &rf.cfg.BackoffBase, "backoff-max": &rf.cfg.BackoffMax,
		"purge-after": &rf.cfg.PurgeAfter, "purge-failed-after": &rf.cfg.PurgeFailedAfter, "purge-interval": &rf.cfg.PurgeInterval,
		"dead-letter-retry": &rf.cfg.DeadLetterRetry, "schedule-lease": &rf.cfg.ScheduleLease,
		"probe-interval": &rf.cfg.ProbeInterval, "probe-interval-max": &rf.cfg.ProbeIntervalMax, "summary-interval": &rf.cfg.SummaryInterval,
		"heartbeat-interval": &rf.cfg.HeartbeatInterval,
	}
	bools := map[string]*bool{"listen": &rf.cfg.Listen, "otel": &rf.obs.otel, "webhook-deny-private": &rf.so.WebhookDenyPrivate}
	for flag, dst := range strs {
		if v, ok := m.fromFile(flag); ok {
			*dst = v.str
		}
	}
	for flag, dst := range ints {
		if v, ok := m.fromFile(flag); ok {
			*dst = v.num
		}
	}
	for flag, dst := range durs {
		if v, ok := m.fromFile(flag); ok {
			*dst = v.dur
		}
	}
	for flag, dst := range bools {
		if v, ok := m.fromFile(flag); ok {
			*dst = v.flag
		}
	}
	if v, ok := m.fromFile("tenant-schemas"); ok {
		rf.tenants.schemas = v.str
	}
	if v, ok := m.fromFile("tenant-query"); ok {
		rf.tenants.query = v.str
	}
	if v, ok := m.fromFile("database-urls"); ok {
		rf.tenants.fileURLs = v.list
	}
	if v, ok := m.fromFile("tenant-metrics"); ok {
		rf.tenants.metrics = v.str
	}
	if v, ok := m.fromFile("tenant-refresh"); ok {
		rf.tenants.refresh = v.dur
	}
	if v, ok := m.fromFile("event-types"); ok {
		rf.eventTypes = v.list
	}
	if v, ok := m.fromFile("route-rule"); ok {
		rf.fileRules = v.rules
	}
	if v, ok := m.fromFile("webhook-allow-network"); ok {
		rf.so.WebhookAllowNetworks = v.list
	}
	for i, p := range rf.eventTypes {
		rf.eventTypes[i] = strings.TrimSpace(p)
	}
	return nil
}

// router builds the router --route, --route-rule and the file's routing
// ask for; nil when none is given, which leaves the sink URL's route
// option or the sinks' default.
func (m *merger) router(rf *relayFlags) (*route.Router, error) {
	if !m.given("route") && !m.given("route-rule") {
		return nil, nil
	}
	if _, err := route.Parse(rf.route); err != nil {
		return nil, usagef("invalid %s: %v", m.name("route"), err)
	}
	rules := rf.fileRules
	if m.flags.Changed("route-rule") {
		rules = nil
		for _, raw := range rf.routeRules {
			pattern, tmpl, found := strings.Cut(raw, "=")
			if !found || strings.TrimSpace(pattern) == "" {
				return nil, usagef("invalid --route-rule %q: use PATTERN=TEMPLATE, such as 'order.*=orders.{event_type}'", clip(raw))
			}
			rules = append(rules, route.Rule{EventType: strings.TrimSpace(pattern), Topic: tmpl})
		}
	}
	r, err := route.New(rf.route, rules...)
	if err != nil {
		return nil, usagef("invalid %s: %v", m.name("route-rule"), err)
	}
	return r, nil
}

// sinkOptionsGiven names how each sink option was set, for openSink to
// refuse one the sink does not take.
func (m *merger) sinkOptionsGiven() map[sinkOption]string {
	given := map[sinkOption]string{}
	for opt, flags := range map[sinkOption][]string{
		optSource:     {"source"},
		optRoute:      {"route", "route-rule"},
		optWebhook:    {"webhook-secret", "sink-concurrency", "webhook-batch", "webhook-deny-private", "webhook-allow-network"},
		optWebhookTLS: {"webhook-ca", "webhook-cert", "webhook-key"},
	} {
		for _, f := range flags {
			// An environment variable (OUTBOX_WEBHOOK_SECRET) may be set
			// for other relays; only a flag or the file counts here.
			if m.given(f) && m.origins[f] != "$"+EnvWebhookSecret {
				given[opt] = m.name(f)
				break
			}
		}
	}
	return given
}

// relayConfigError names the flag, variable or config file key behind an
// invalid RelayConfig field.
func (m *merger) relayConfigError(err error) error {
	var ce *outbox.ConfigError
	if errors.As(err, &ce) {
		if flag, ok := relayFlagNames[ce.Field]; ok {
			return usagef("invalid %s: %v", m.name(flag), ce.Err)
		}
		return &usageError{err: err}
	}
	return err
}

// checkPositive refuses a numeric flag the operator set to zero or less:
// left alone, zero would silently mean the default.
func checkPositive(cmd *cobra.Command, positive map[string]bool) error {
	var bad []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if ok, checked := positive[f.Name]; checked && !ok {
			bad = append(bad, f.Name)
		}
	})
	if len(bad) > 0 {
		f := cmd.Flags().Lookup(bad[0])
		return usagef("invalid --%s %s: use a positive value", f.Name, f.Value.String())
	}
	return nil
}

// relayConfigError names the flag behind an invalid RelayConfig field.
func relayConfigError(err error) error {
	return (&merger{origins: map[string]string{}}).relayConfigError(err)
}

// closeSink closes sinks that hold resources (connections, goroutines).
func closeSink(s outbox.Sink) error {
	if c, ok := s.(io.Closer); ok {
		if err := c.Close(); err != nil {
			return fmt.Errorf("close sink: %w", err)
		}
	}
	return nil
}
