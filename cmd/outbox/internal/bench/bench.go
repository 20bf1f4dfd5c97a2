// Package bench measures the outbox on a real database — PostgreSQL, SQLite
// or MySQL/MariaDB: how fast the relay drains a backlog compared with a plain
// hand-written SQL relay loop, what a running relay costs the application's
// writers, and how long an event takes from commit to the sink. `outbox
// bench` runs it; Go tests and benchmarks use it directly.
//
// Every scenario runs in scratch space of its own (outbox_bench_<random>):
// a schema on PostgreSQL, a database file next to the URL's file on SQLite,
// a database on MySQL/MariaDB. It is migrated with outboxmigrate and removed
// when the scenario ends, also when it fails or is cancelled; the database's
// own tables are never touched. The relay, the reference loop and the
// writers all run in the calling process, so the reported RSS is that
// process's. What differs per database sits behind the interfaces in
// store.go, one file per database.
package bench

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
)

// Scenario names one measurement.
type Scenario string

// The scenarios, in the order Run runs them.
const (
	// ScenarioReference drains a backlog with a plain hand-written SQL
	// loop: the yardstick that makes drain's numbers machine-independent.
	ScenarioReference Scenario = "reference"
	// ScenarioReferenceMinimal drains a backlog with the minimal two-write
	// loop (claim, then mark processed) on a minimal table of its own,
	// with durable commits: the yardstick of issue 14. PostgreSQL only.
	ScenarioReferenceMinimal Scenario = "reference-minimal"
	// ScenarioSink publishes the backlog's events straight through the
	// sink with no database: the sink's own limit in this run.
	ScenarioSink Scenario = "sink"
	// ScenarioDrain drains a pre-filled backlog with outbox.Relay.
	ScenarioDrain Scenario = "drain"
	// ScenarioSteady runs writers flat out, without and then with the
	// relay, and compares their throughput.
	ScenarioSteady Scenario = "steady"
	// ScenarioLatency writes at a fixed rate and measures commit→sink-ack
	// latency.
	ScenarioLatency Scenario = "latency"
	// ScenarioTenants measures outbox.Tenants against issue 16's targets:
	// 100 tenants' drain against one schema's, a quiet tenant's latency
	// during another's flood, 1,000 schemas' idle cost and active
	// latency (PostgreSQL; several minutes). "all" leaves it out: name it.
	ScenarioTenants Scenario = "tenants"
	// ScenarioReceive POSTs events through the webhook sink into an
	// inbox webhook handler (outbox receive's path), and compares it with
	// a hand-written INSERT … ON CONFLICT DO NOTHING loop at the same
	// concurrency. PostgreSQL only.
	ScenarioReceive Scenario = "receive"
)

// Scenarios lists every scenario in run order.
var Scenarios = []Scenario{ScenarioReference, ScenarioReferenceMinimal, ScenarioSink, ScenarioDrain, ScenarioSteady, ScenarioLatency, ScenarioReceive}

// ParseScenarios returns the scenarios named in names ("all" for every
// one), deduplicated and in run order. No names means all.
func ParseScenarios(names []string) ([]Scenario, error) {
	if len(names) == 0 {
		return slices.Clone(Scenarios), nil
	}
	want := map[Scenario]bool{}
	for _, n := range names {
		s := Scenario(strings.ToLower(strings.TrimSpace(n)))
		switch {
		case s == "all":
			for _, a := range Scenarios {
				want[a] = true
			}
		case slices.Contains(Scenarios, s) || s == ScenarioTenants:
			want[s] = true
		default:
			return nil, fmt.Errorf("unknown scenario %q: use %s, %s or all", n, joinNames(Scenarios), ScenarioTenants)
		}
	}
	var out []Scenario
	for _, s := range append(slices.Clone(Scenarios), ScenarioTenants) {
		if want[s] {
			out = append(out, s)
		}
	}
	return out, nil
}

// Wake is how the relay learns of new events in steady and latency.
type Wake string

// Wake-up modes.
const (
	// WakePoll leaves the relay to its poll interval and trailing claim:
	// the library's defaults.
	WakePoll Wake = "poll"
	// WakeListen sets RelayConfig.Listen and has the writers notify
	// (WriterConfig.NotifyInterval = outbox.NotifyIntervalDefault).
	// PostgreSQL only.
	WakeListen Wake = "listen"
	// WakeProcess has each writer call Relay.Wake after its commit, as an
	// application running the relay in its own process would.
	WakeProcess Wake = "process"
)

// Wakes lists every wake-up mode.
var Wakes = []Wake{WakePoll, WakeListen, WakeProcess}

// ParseWakes parses a --wake value: one mode or "all".
func ParseWakes(s string) ([]Wake, error) {
	if s == "all" {
		return slices.Clone(Wakes), nil
	}
	if w := Wake(s); slices.Contains(Wakes, w) {
		return []Wake{w}, nil
	}
	return nil, fmt.Errorf("unknown wake-up mode %q: use %s or all", s, joinNames(Wakes))
}

// Retentions lists every retention mode.
var Retentions = []outbox.Retention{outbox.RetainProcessed, outbox.RetainDelete, outbox.RetainArchive}

// ParseRetentions parses a --retention value: one mode or "all".
func ParseRetentions(s string) ([]outbox.Retention, error) {
	if s == "all" {
		return slices.Clone(Retentions), nil
	}
	r, err := outbox.ParseRetention(s)
	if err != nil {
		return nil, fmt.Errorf("unknown retention mode %q: use %s or all", s, joinNames(Retentions))
	}
	return []outbox.Retention{r}, nil
}

func joinNames[T ~string](names []T) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}

// Defaults; Config.WithDefaults fills zero fields with them.
const (
	EventsDefault       = 200000
	BatchSizeDefault    = 1000
	WorkersDefault      = 2
	WritersDefault      = 8
	PayloadSizeDefault  = 325
	DurationDefault     = 20 * time.Second
	RateDefault         = 1000
	PollIntervalDefault = 10 * time.Millisecond
	// PlainLoopConcurrencyDefault is the plain loop's requests in flight:
	// the webhook sink's default Concurrency.
	PlainLoopConcurrencyDefault = 16
	// SchemaPrefixDefault starts every scratch schema's, file's or
	// database's name.
	SchemaPrefixDefault = "outbox_bench_"
	// PayloadSizeMin is the smallest payload the generator can build.
	PayloadSizeMin = 16
	// EventsMax, PayloadSizeMax and WritersMax bound what one run may
	// allocate: the recorder keeps an acknowledgement per event.
	EventsMax      = 10_000_000
	PayloadSizeMax = 16 << 20
	WritersMax     = 1000
)

// discardSinkName names the Discard sink in reports.
const discardSinkName = "discard:"

// Config configures the scenarios.
type Config struct {
	// Events is how many events drain, reference and reference-minimal
	// pre-fill, and sink and receive publish. Defaults to EventsDefault.
	Events int
	// BatchSize is the relay's and the reference loop's batch size.
	// Defaults to BatchSizeDefault.
	BatchSize int
	// Workers is how many claim loops the relay and the reference run.
	// Defaults to WorkersDefault.
	Workers int
	// MaxInFlight is the relay's RelayConfig.MaxInFlight, and how many
	// batches sink publishes at once. Defaults to the relay's default
	// (outbox.MaxInFlightDefault, or Workers when larger).
	MaxInFlight int
	// Writers is how many writer goroutines steady and latency run, and
	// receive's requests in flight and insert loops. Defaults to
	// WritersDefault.
	Writers int
	// PayloadSize is each event's JSON payload size in bytes. Defaults to
	// PayloadSizeDefault.
	PayloadSize int
	// ReceiveBatch is how many events receive's webhook sink puts in one
	// request (a CloudEvents JSON batch above 1, as relay --webhook-batch
	// sends them). Defaults to 1: one event per request.
	ReceiveBatch int
	// Duration is how long latency and steady's relay phase write (steady's
	// relay-less phase is two halves of it). Defaults to DurationDefault.
	Duration time.Duration
	// Rate is the writers' total events per second in latency. Defaults to
	// RateDefault.
	Rate int
	// Retentions are the retention modes drain and reference run in, one
	// run each; steady and latency use the first. Defaults to
	// outbox.RetainProcessed.
	Retentions []outbox.Retention
	// OrderedKeys, when set, adds an ordered drain (RelayConfig.Ordering
	// aggregate) after each unordered one, one per entry, with the backlog
	// spread over that many aggregates; and likewise an ordered latency run
	// after each unordered one (not with WakeLogical), the writers' events
	// spread over that many aggregates.
	OrderedKeys []int
	// Leases is how the relays the bench starts share the events
	// (outbox.RelayConfig.Leases), all but the capture relay's (whose table
	// path takes row leases): with outbox.LeasesPartitions the unordered
	// drain, steady, latency and tenants runs own partitions too
	// (PostgreSQL). Defaults to outbox.LeasesAuto.
	Leases outbox.Leases
	// Wakes are the wake-up modes steady and latency run in, one run each.
	// Defaults to WakePoll. WakeListen needs PostgreSQL.
	Wakes []Wake
	// Capture is poll (the table relay, the default), logical (the capture
	// relay: steady and latency in wake-up mode WakeLogical, and drain as a
	// burst written after the slot exists) or all (both, side by side).
	// Logical needs PostgreSQL with wal_level = logical.
	Capture string
	// PollInterval is the relay's and the reference loop's wait after an
	// empty claim (after a short one the relay claims again within 5ms, or
	// PollInterval when that is shorter). Defaults to PollIntervalDefault.
	PollInterval time.Duration
	// Sink receives the events. Defaults to Discard. It must accept every
	// event: a failed publish ends the scenario with an error.
	Sink outbox.Sink
	// SinkName describes Sink in reports. Defaults to "discard:" when Sink
	// is nil, else to the sink's type.
	SinkName string
	// PlainLoopURL, when set (an http or https URL: the webhook --sink's),
	// makes each unordered drain run the plain loop beside it: the
	// reference loop's claim and mark, with each event POSTed on its own
	// to this URL by a keep-alive client holding PlainLoopConcurrency
	// requests in flight across the loops. The drain then reports
	// PlainLoopEventsPerS and RatioToPlainLoop.
	PlainLoopURL string
	// PlainLoopConcurrency is the plain loop's requests in flight; set it
	// to the webhook sink's Concurrency. Defaults to
	// PlainLoopConcurrencyDefault.
	PlainLoopConcurrency int
	// SchemaPrefix starts each scratch schema's (PostgreSQL), file's
	// (SQLite) or database's (MySQL/MariaDB) name. Defaults to
	// SchemaPrefixDefault.
	SchemaPrefix string
	// Timeline, when set, receives every event a latency run measured, as
	// CSV: a header, then per event the run's wake-up mode, ordering and
	// keys, the event's ID, when its writer's Commit returned (RFC 3339,
	// UTC) and its latency in milliseconds. Each run adds its lines when it
	// ends.
	Timeline io.Writer
	// Logger receives the relay's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Progress, when set, is told what the bench is doing, one short line
	// at a time (for a terminal).
	Progress func(msg string)
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Events = cmp.Or(c.Events, EventsDefault)
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.Workers = cmp.Or(c.Workers, WorkersDefault)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, max(outbox.MaxInFlightDefault, c.Workers))
	c.Writers = cmp.Or(c.Writers, WritersDefault)
	c.PayloadSize = cmp.Or(c.PayloadSize, PayloadSizeDefault)
	c.ReceiveBatch = cmp.Or(c.ReceiveBatch, 1)
	c.Duration = cmp.Or(c.Duration, DurationDefault)
	c.Rate = cmp.Or(c.Rate, RateDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.SchemaPrefix = cmp.Or(c.SchemaPrefix, SchemaPrefixDefault)
	c.Capture = cmp.Or(c.Capture, CapturePoll)
	c.Leases = cmp.Or(c.Leases, outbox.LeasesAuto)
	c.PlainLoopConcurrency = cmp.Or(c.PlainLoopConcurrency, PlainLoopConcurrencyDefault)
	if len(c.Retentions) == 0 {
		c.Retentions = []outbox.Retention{outbox.RetainProcessed}
	}
	if len(c.Wakes) == 0 {
		c.Wakes = []Wake{WakePoll}
	}
	if c.Sink == nil {
		c.Sink = Discard{}
		if c.SinkName == "" {
			c.SinkName = discardSinkName
		}
	}
	if c.SinkName == "" {
		c.SinkName = fmt.Sprintf("%T", c.Sink)
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// ConfigError is an invalid Config field.
type ConfigError struct {
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return "invalid " + e.Field + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *ConfigError) Unwrap() error { return e.Err }

// Validate reports the first invalid field as a *ConfigError.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case c.Capture != CapturePoll && c.Capture != CaptureLogical && c.Capture != CaptureAll:
		return bad("Capture", "is %q: use %s, %s or %s", c.Capture, CapturePoll, CaptureLogical, CaptureAll)
	case c.PlainLoopConcurrency < 1:
		return bad("PlainLoopConcurrency", "is %d: use at least 1", c.PlainLoopConcurrency)
	case c.PlainLoopURL != "" && !validPlainLoopURL(c.PlainLoopURL):
		return bad("PlainLoopURL", "is not an http or https URL: use the webhook sink's URL")
	case c.Events < 1 || c.Events > EventsMax:
		return bad("Events", "is %d: use 1 to %d", c.Events, EventsMax)
	case c.BatchSize < 1 || c.BatchSize > outbox.BatchSizeMax:
		return bad("BatchSize", "is %d: use 1 to %d", c.BatchSize, outbox.BatchSizeMax)
	case c.Workers < 1 || c.Workers > outbox.WorkersMax:
		return bad("Workers", "is %d: use 1 to %d", c.Workers, outbox.WorkersMax)
	case c.MaxInFlight < c.Workers || c.MaxInFlight > outbox.MaxInFlightMax:
		return bad("MaxInFlight", "is %d with %d workers: use %d to %d", c.MaxInFlight, c.Workers, c.Workers, outbox.MaxInFlightMax)
	case c.Writers < 1 || c.Writers > WritersMax:
		return bad("Writers", "is %d: use 1 to %d", c.Writers, WritersMax)
	case c.PayloadSize < PayloadSizeMin:
		return bad("PayloadSize", "is %d: use at least %d bytes", c.PayloadSize, PayloadSizeMin)
	case c.PayloadSize > PayloadSizeMax:
		return bad("PayloadSize", "is %d: use at most %d bytes", c.PayloadSize, PayloadSizeMax)
	case c.Duration <= 0:
		return bad("Duration", "is %v: use a positive duration", c.Duration)
	case c.Rate < 1:
		return bad("Rate", "is %d: use at least 1 event per second", c.Rate)
	case c.PollInterval <= 0:
		return bad("PollInterval", "is %v: use a positive duration", c.PollInterval)
	case !schemaPrefixPattern.MatchString(c.SchemaPrefix) || strings.HasPrefix(c.SchemaPrefix, "pg_"):
		return bad("SchemaPrefix", "is %q: use 1 to 40 lower-case letters, digits and underscores, not starting with a digit or pg_", c.SchemaPrefix)
	}
	if _, err := outbox.ParseLeases(string(c.Leases)); err != nil {
		return bad("Leases", "is %q: use auto, rows or partitions", c.Leases)
	}
	for _, r := range c.Retentions {
		if _, err := outbox.ParseRetention(string(r)); err != nil {
			return bad("Retentions", "has %q: use %s", r, joinNames(Retentions))
		}
	}
	for _, k := range c.OrderedKeys {
		if k < 1 || k > c.Events {
			return bad("OrderedKeys", "has %d: use 1 to the number of events (%d)", k, c.Events)
		}
	}
	for _, w := range c.Wakes {
		if !slices.Contains(Wakes, w) {
			return bad("Wakes", "has %q: use %s", w, joinNames(Wakes))
		}
	}
	return nil
}

var schemaPrefixPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// errSinkFailed ends a scenario whose sink rejected an event: with retries
// in play the numbers would measure the backoff, not the relay.
var errSinkFailed = errors.New("the sink rejected events; the bench needs a sink that accepts every event")

// Payload returns a JSON object of exactly size bytes (at least
// PayloadSizeMin) shaped like an order event.
func Payload(size int) []byte {
	size = max(size, PayloadSizeMin)
	const head = `{"order_id":1234567,"customer":"customer-0042","total_cents":4999,"currency":"EUR","lines":[{"sku":"SKU-1","qty":1}],"pad":"`
	if size >= len(head)+2 {
		return []byte(head + strings.Repeat("x", size-len(head)-2) + `"}`)
	}
	const small = `{"pad":"`
	return []byte(small + strings.Repeat("x", size-len(small)-2) + `"}`)
}
