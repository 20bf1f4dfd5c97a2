package bench

// Result is a whole bench run: the settings, the server, and one report per
// scenario run. It is what `outbox bench --json` prints.
type Result struct {
	Settings Settings `json:"settings"`
	// Database is the kind of database: postgres, sqlite, mariadb or
	// mysql.
	Database string `json:"database"`
	// Server is the database's version: PostgreSQL's server_version,
	// SQLite's sqlite_version(), MySQL's or MariaDB's VERSION().
	Server string `json:"server"`
	// Autovacuum is PostgreSQL's autovacuum setting (off: dead tuples stay
	// until something vacuums the table); nil, and absent in JSON,
	// elsewhere.
	Autovacuum *bool `json:"autovacuum,omitempty"`
	// CPUs is the bench host's logical CPU count.
	CPUs int `json:"cpus"`
	// MachineCPUs is the machine's online cores as /proc/stat counts
	// them: the cores MachineCPUBusyS is summed over and
	// CPULimitEventsPerS divides. 0, and absent in JSON, without
	// /proc/stat.
	MachineCPUs int `json:"machine_cpus,omitempty"`
	// Notes say how to read the numbers.
	Notes     []string `json:"notes"`
	Scenarios []Report `json:"scenarios"`
}

// DatabaseName is Database as people write it: PostgreSQL, SQLite,
// MariaDB or MySQL.
func (r Result) DatabaseName() string {
	switch r.Database {
	case "postgres":
		return "PostgreSQL"
	case "sqlite":
		return "SQLite"
	case "mariadb":
		return "MariaDB"
	case "mysql":
		return "MySQL"
	}
	return r.Database
}

// Settings are the Config a run used, as reported.
type Settings struct {
	Events         int      `json:"events"`
	BatchSize      int      `json:"batch_size"`
	Workers        int      `json:"workers"`
	MaxInFlight    int      `json:"max_in_flight"`
	Writers        int      `json:"writers"`
	PayloadSize    int      `json:"payload_size"`
	DurationS      float64  `json:"duration_s"`
	Rate           int      `json:"rate"`
	PollIntervalMS float64  `json:"poll_interval_ms"`
	Retentions     []string `json:"retentions"`
	Wakes          []string `json:"wakes"`
	Sink           string   `json:"sink"`
	Leases         string   `json:"leases"`
}

// Report is one scenario run. The embedded pointers hold what only some
// scenarios measure; in JSON their fields sit at the top level and are
// absent when nil.
type Report struct {
	Scenario  Scenario `json:"scenario"`
	Retention string   `json:"retention"`
	// Schema is the scratch space the scenario ran in, removed since: the
	// schema (PostgreSQL), the database (MySQL/MariaDB) or the file's path
	// (SQLite).
	Schema string `json:"schema"`
	// Sink, when set, is the sink this scenario used instead of
	// Settings.Sink: "discard:" for the discard drain that a drain's
	// LimitEventsPerS is taken from.
	Sink string `json:"sink,omitempty"`
	// Ordering is "aggregate" for an ordered drain, over Keys aggregates.
	Ordering string `json:"ordering,omitempty"`
	Keys     int    `json:"keys,omitempty"`
	// Wake is the wake-up mode (steady and latency).
	Wake Wake `json:"wake,omitempty"`
	// Events is how many events the scenario delivered (drain, reference,
	// reference-minimal, sink) or committed while the relay ran (steady,
	// latency).
	Events int64 `json:"events"`
	// Seconds is the measured wall time.
	Seconds float64 `json:"seconds"`
	// EventsPerS is the scenario's headline rate: delivered per second for
	// drain, reference, reference-minimal, sink and steady (the relay's
	// rate), committed per second for latency (the writers' achieved rate).
	EventsPerS float64 `json:"events_per_s"`
	// Duplicates counts deliveries of an event that had been delivered
	// already (at-least-once allows them; a healthy run has none).
	Duplicates int64 `json:"duplicates"`

	*DrainStats
	*SteadyStats
	*LatencyStats
	*TenantsStats

	// Table is the outbox table before and after the measured part.
	Table TableStats `json:"table"`
	// RSSPeakBytes is the highest resident set size of this process
	// sampled during the measured part: the relay's memory, plus the
	// writers' in steady and latency. 0 where /proc is missing.
	RSSPeakBytes int64 `json:"rss_peak_bytes"`
	// MachineCPUBusyS is the whole machine's busy CPU time during the
	// measured part, in seconds summed over all cores (/proc/stat: user,
	// nice, system, irq, softirq, steal): this process, the database, a
	// broker on this machine, and anything else running. 0, and absent
	// in JSON, without /proc/stat.
	MachineCPUBusyS float64 `json:"machine_cpu_busy_s,omitempty"`
	// MachineCPUSPerEvent is MachineCPUBusyS / Events.
	MachineCPUSPerEvent float64 `json:"machine_cpu_s_per_event,omitempty"`
	// WebhookBatch is receive's events per request, when above 1.
	WebhookBatch int `json:"webhook_batch,omitempty"`
}

// DrainStats compares the relay with the reference loop (drain only).
type DrainStats struct {
	ReferenceEventsPerS float64 `json:"reference_events_per_s"`
	// RatioToReference is EventsPerS / ReferenceEventsPerS, both from the
	// same run and retention mode.
	RatioToReference float64 `json:"ratio_to_reference"`
	// RatioToUnordered, for an ordered drain, is EventsPerS over the
	// unordered drain's in the same run and retention mode.
	RatioToUnordered float64 `json:"ratio_to_unordered,omitempty"`
	// LimitEventsPerS, for a drain to a sink other than discard run with
	// the sink scenario, is the slower of the discard drain (the database
	// side: the relay with a sink that costs nothing) and the sink scenario
	// (the broker side: the sink with no database), both from the same run
	// and, for the discard drain, the same retention mode. A relay that
	// overlapped claiming and publishing perfectly would drain at this
	// rate. Absent otherwise.
	LimitEventsPerS float64 `json:"limit_events_per_s,omitempty"`
	// DiscardDrainEventsPerS and SinkEventsPerS are the two rates
	// LimitEventsPerS is the smaller of.
	DiscardDrainEventsPerS float64 `json:"discard_drain_events_per_s,omitempty"`
	SinkEventsPerS         float64 `json:"sink_events_per_s,omitempty"`
	// RatioToLimit is EventsPerS / LimitEventsPerS.
	RatioToLimit float64 `json:"ratio_to_limit,omitempty"`
	// CPULimitEventsPerS, reported with LimitEventsPerS when /proc/stat
	// is there, is Result.MachineCPUs / (DiscardDrainCPUSPerEvent +
	// SinkCPUSPerEvent): the rate at which the machine's cores are all
	// busy when the database and relay cost what the discard drain cost
	// per event and the sink what the sink scenario cost. It is the
	// ceiling when the database, the relay and the broker share the
	// machine's cores; with the broker on another host its CPU is not
	// in the machine's, and the ceiling is that of the database and
	// relay side plus the client's side of publishing.
	CPULimitEventsPerS float64 `json:"cpu_limit_events_per_s,omitempty"`
	// DiscardDrainCPUSPerEvent and SinkCPUSPerEvent are the
	// MachineCPUSPerEvent of the discard drain and the sink scenario.
	DiscardDrainCPUSPerEvent float64 `json:"discard_drain_cpu_s_per_event,omitempty"`
	SinkCPUSPerEvent         float64 `json:"sink_cpu_s_per_event,omitempty"`
	// RatioToCPULimit is EventsPerS / CPULimitEventsPerS.
	RatioToCPULimit float64 `json:"ratio_to_cpu_limit,omitempty"`
	// PlainLoopEventsPerS, for an unordered drain run with
	// Config.PlainLoopURL (a webhook --sink), is the plain loop's rate in
	// the same run and retention mode: the reference loop's claim (SKIP
	// LOCKED, a lease) and mark, each event POSTed on its own to the same
	// URL with the same requests in flight and a keep-alive client.
	// RatioToPlainLoop is EventsPerS / PlainLoopEventsPerS. Absent
	// otherwise.
	PlainLoopEventsPerS float64 `json:"plain_loop_events_per_s,omitempty"`
	RatioToPlainLoop    float64 `json:"ratio_to_plain_loop,omitempty"`
	// HandHTTPEventsPerS, for receive, is the hand-written webhook
	// handler's rate in the same run (one event per request), and
	// RatioToHandHTTP is EventsPerS / HandHTTPEventsPerS. Absent
	// otherwise.
	HandHTTPEventsPerS float64 `json:"hand_http_events_per_s,omitempty"`
	RatioToHandHTTP    float64 `json:"ratio_to_hand_http,omitempty"`
}

// SteadyStats is what the relay costs writers running flat out.
type SteadyStats struct {
	WriterTPSWithoutRelay float64 `json:"writer_tps_without_relay"`
	WriterTPSWithRelay    float64 `json:"writer_tps_with_relay"`
	// WriterTPSRatio is WriterTPSWithRelay / WriterTPSWithoutRelay.
	WriterTPSRatio float64 `json:"writer_tps_ratio"`
	// BacklogMid and BacklogEnd are the undelivered events (pending or
	// processing) halfway through and at the end of the relay phase.
	BacklogMid int64 `json:"backlog_mid"`
	BacklogEnd int64 `json:"backlog_end"`
	// BacklogGrew is true when BacklogEnd exceeds both BacklogMid and one
	// batch per relay loop: the relay did not keep up.
	BacklogGrew bool `json:"backlog_grew"`
}

// LatencyStats is commit→sink-ack latency at a fixed rate.
type LatencyStats struct {
	// WarmupEvents were committed, one per writer connection, and
	// delivered before the measured run: not counted.
	WarmupEvents     int64   `json:"warmup_events"`
	TargetEventsPerS float64 `json:"target_events_per_s"`
	// RateReached is true when the writers achieved at least 99% of the
	// target rate.
	RateReached bool `json:"rate_reached"`
	// Count is the number of events measured: every committed event.
	Count int64   `json:"latency_count"`
	P50MS float64 `json:"p50_ms"`
	P95MS float64 `json:"p95_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
}

// TableStats is the outbox table's storage before and after.
type TableStats struct {
	Before TableSize `json:"before"`
	After  TableSize `json:"after"`
}

// TableSize is one reading of the outbox table's storage: what each
// database tells cheaply. A field a database does not tell is nil, and
// absent in JSON.
type TableSize struct {
	// TotalBytes is the outbox table's storage: pg_total_relation_size
	// (heap, indexes and TOAST) on PostgreSQL, data_length + index_length
	// on MySQL/MariaDB. On SQLite it is the whole scratch file,
	// page_count × page_size: outbox_events, the archive and the orders
	// table, and free pages, since the file never shrinks.
	TotalBytes int64 `json:"total_bytes"`
	// IndexBytes is pg_indexes_size, or index_length on MySQL/MariaDB.
	IndexBytes *int64 `json:"index_bytes,omitempty"`
	// LiveTuples and DeadTuples are from pg_stat_user_tables (PostgreSQL
	// only).
	LiveTuples *int64 `json:"live_tuples,omitempty"`
	DeadTuples *int64 `json:"dead_tuples,omitempty"`
	// ArchiveTotalBytes is outbox_events_archive's size, measured as
	// TotalBytes is (PostgreSQL, MySQL/MariaDB).
	ArchiveTotalBytes *int64 `json:"archive_total_bytes,omitempty"`
}
