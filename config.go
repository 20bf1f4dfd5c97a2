package outbox

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/errtext"
)

// Retention says what the relay does with a delivered event's row.
type Retention string

// Retention modes.
const (
	// RetainProcessed keeps delivered events in outbox_events with status
	// processed: the history stays queryable and replayable, and idempotency
	// keys keep deduplicating against it; `outbox purge` trims it. The
	// default.
	RetainProcessed Retention = Retention(driver.RetainProcessed)
	// RetainDelete deletes each event once the sink acknowledged it: the
	// table holds only undelivered events and stays small, the fastest
	// mode. An idempotency key then only deduplicates against events not
	// yet delivered.
	RetainDelete Retention = Retention(driver.RetainDelete)
	// RetainArchive moves each delivered event to outbox_events_archive, so
	// the hot table stays small and history is kept apart (purge trims it).
	// Idempotency keys deduplicate as with RetainDelete.
	RetainArchive Retention = Retention(driver.RetainArchive)
)

// ParseRetention returns the retention mode named s.
func ParseRetention(s string) (Retention, error) {
	switch r := Retention(s); r {
	case RetainProcessed, RetainDelete, RetainArchive:
		return r, nil
	}
	return "", &ConfigError{Field: "Retention", Err: fmt.Errorf("unknown mode %q: use processed, delete or archive", s)}
}

// Relay defaults; RelayConfig.WithDefaults fills zero fields with them.
const (
	BatchSizeDefault    = 100
	WorkersDefault      = 1
	PollIntervalDefault = time.Second
	LeaseDefault        = 30 * time.Second
	SinkTimeoutDefault  = 10 * time.Second
	DBTimeoutDefault    = 10 * time.Second
	MaxAttemptsDefault  = 5
	BackoffBaseDefault  = time.Second
	BackoffMaxDefault   = 5 * time.Minute
	// MaxInFlightDefault is the default of RelayConfig.MaxInFlight (at
	// least Workers).
	MaxInFlightDefault = 4
	// MaxInFlightBytesDefault is the default of
	// RelayConfig.MaxInFlightBytes: 64 MiB.
	MaxInFlightBytesDefault = 64 << 20
	// ProbeIntervalDefault and ProbeIntervalMaxDefault shape the probes of
	// an unreachable sink.
	ProbeIntervalDefault    = time.Second
	ProbeIntervalMaxDefault = 30 * time.Second
	// SummaryIntervalDefault is how often the relay logs its summary.
	SummaryIntervalDefault = time.Minute
	// BatchSizeMax bounds BatchSize: a claim's rows travel in one result set
	// and are published as one batch.
	BatchSizeMax = 10000
)

// RelayConfig configures a Relay.
type RelayConfig struct {
	// Sink receives the claimed events. Required.
	Sink Sink
	// Schema holds outbox_events. Defaults to SchemaDefault.
	Schema string
	// RelayID names this relay in locked_by and in logs; it must differ
	// between relays sharing a table. Defaults to hostname:pid.
	RelayID string
	// BatchSize is the most events claimed at once. Defaults to
	// BatchSizeDefault.
	BatchSize int
	// MaxBatchBytes, when positive, bounds the payload and header bytes of
	// one claim, so that a batch of large payloads cannot exhaust the
	// relay's memory: a claim takes events in order while their total stays
	// within it, and always takes the first one, however large, so that no
	// event is stuck. Sizes are as stored: PostgreSQL compresses a large
	// payload (often 2-10x for JSON), so there a claim can bring that much
	// more into memory; leave headroom. Zero (the default) for no bound: a
	// claim with a budget costs a window over the locked rows on
	// PostgreSQL and one more statement on MySQL and SQLite.
	MaxBatchBytes int
	// Workers is how many claim-publish-mark loops run at once, so the
	// database claims the next batch while the sink publishes this one.
	// Defaults to WorkersDefault.
	Workers int
	// MaxInFlight is the most batches the relay holds at once, claimed and
	// not yet settled: a claim loop claims its next batch while the sink
	// publishes the last one and the database marks the one before, and
	// a sink with a window of unacknowledged messages keeps it full across
	// batches. A loop takes a slot before it claims, so no claimed batch
	// waits: its lease covers one claim, publish and mark as with a
	// single batch. 1 with one worker is the strict claim-publish-mark
	// loop. It must be at least Workers, and each batch in flight may
	// hold one database connection while it is marked. Defaults to
	// MaxInFlightDefault, or Workers when that is larger.
	MaxInFlight int
	// MaxInFlightBytes bounds the payload and header bytes (as stored) of
	// the batches in flight: a loop claims only while the batches it holds
	// are under it, so memory stays within it plus one batch (bounded in
	// turn by MaxBatchBytes, when set). Defaults to
	// MaxInFlightBytesDefault.
	MaxInFlightBytes int
	// PollInterval is how long a loop sleeps after an empty claim, unless
	// Relay.Wake (or a NOTIFY, with Listen) ends the sleep. A full batch is
	// followed by another claim at once, a short one by another claim 5ms
	// later (or after PollInterval, when that is shorter). Defaults to
	// PollIntervalDefault.
	PollInterval time.Duration
	// Lease is how long a claim holds its events; after it, any relay may
	// take them over. Defaults to LeaseDefault.
	Lease time.Duration
	// SinkTimeout bounds one Publish call. It must be shorter than Lease so
	// a batch is settled before another relay can re-claim it. Defaults to
	// SinkTimeoutDefault, or half the lease when that is shorter.
	SinkTimeout time.Duration
	// DBTimeout bounds each of the relay's database calls (a claim, one
	// try of a mark or a release, a lease rescue), so a connection that
	// stopped answering without closing (a half-open TCP connection, a
	// proxy or firewall that dropped its state) fails the call instead of
	// hanging the relay; the call is retried on a fresh connection. It
	// must be shorter than Lease. Defaults to DBTimeoutDefault, or half
	// the lease when that is shorter.
	DBTimeout time.Duration
	// MaxAttempts is how many attempts dead-letter an event whose row has
	// no max_attempts. An attempt is a claim that ended without delivery: a
	// failed publish, or a lease that expired because the relay holding the
	// event died or hung (perhaps because publishing it kills the process;
	// see RescueInterval). Defaults to MaxAttemptsDefault.
	MaxAttempts int
	// BackoffBase and BackoffMax shape the retry delay after the n-th
	// failure: BackoffBase·2^n with jitter, at most BackoffMax. Default to
	// BackoffBaseDefault and BackoffMaxDefault.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// RescueInterval is how often the relay returns events whose lease
	// expired (their relay died) to pending. A rescue counts the expiry as
	// an attempt, keeps the event's last error and appends a note of the
	// expiry to it, and dead-letters an event that has run out of attempts;
	// a rescued event is a suspect and is claimed alone from then on, so an
	// event that crashes every relay that publishes it takes no other event
	// down with it after the first time. Defaults to a quarter of the
	// lease, between 1 and 15 seconds.
	RescueInterval time.Duration
	// ShutdownTimeout bounds Run's graceful stop: in-flight batches that do
	// not finish in time are cancelled and released. Run returns at most a
	// few seconds (StopGrace) after it, even when the database is down or
	// the sink ignores the cancellation; what could not be released stays
	// leased until its lease ends, and the relay logs it. Defaults to
	// SinkTimeout plus 5 seconds, at most a second less than the lease, so
	// a stopping relay never holds a lease past its end.
	ShutdownTimeout time.Duration
	// Listen makes the relay hold one connection in LISTEN and claim as
	// soon as a writer with WriterConfig.NotifyInterval commits events,
	// instead of waiting out PollInterval. Writers in the relay's own
	// process can call Relay.Wake instead.
	Listen bool
	// PgBouncer says the relay's PostgreSQL pool goes through PgBouncer in
	// transaction mode (or another pooler that lends a server connection
	// per transaction); configure the pool with ConfigurePgBouncer. The
	// relay then keeps no session state: no LISTEN (Listen is refused;
	// wake-ups come from the poll, the trailing claim and Relay.Wake), no
	// prepared statements, no startup parameters. Without it, Start
	// refuses a pool that reaches PostgreSQL through a pooler, with
	// ErrPooler, rather than misbehave later.
	PgBouncer bool
	// Retention is what happens to a delivered event's row. Defaults to
	// RetainProcessed.
	Retention Retention
	// EventTypes, when set, limits the relay to events whose type matches
	// one of these patterns, where * matches any run of characters
	// ("order.*"). The filter is part of the claim statement, so relays with
	// disjoint patterns can serve different sinks from one table.
	EventTypes []string
	// Ordering says whether the relay keeps per-aggregate order
	// (OrderingAggregate; schema migration 7, and on MySQL/MariaDB a
	// schema prepared with outboxmigrate.Config.Ordering, without which
	// Start refuses). Defaults to OrderingNone.
	Ordering Ordering
	// OrderedFailure is what an aggregate's later events do once its first
	// unfinished event is dead-lettered, in ordered mode. Defaults to
	// OrderedFailureBlock.
	OrderedFailure OrderedFailure
	// Leases says how relays share the events: a lease per event, or
	// partitions of keys owned by one relay each (docs/ordering.md).
	// Defaults to LeasesAuto.
	Leases Leases
	// CaptureSlot, when not empty, makes this relay the table path of the
	// change-data-capture relay (package outboxcdc, PostgreSQL only) that
	// streams from this replication slot (outboxcdc.Slot.Name): it claims
	// only the events the stream does not deliver, those written before
	// the slot existed, those written with a delay, and those whose
	// publish from the stream failed (which keep their retry schedule,
	// backoff and dead-lettering). Each claim looks only at the oldest
	// due pending events, ten batches and at least 1,000: one of its own
	// due behind more unsettled stream events than that waits until the
	// stream has settled them (docs/cdc.md). Leave it empty otherwise. It
	// cannot be combined with MaxBatchBytes or OrderingAggregate; with
	// EventTypes, give the stream (outboxcdc.Config.EventTypes) the same.
	CaptureSlot string
	// PurgeAfter, when positive, makes the fleet's leading relay delete
	// processed events (and archived ones) older than this, every
	// PurgeInterval, in batches of PurgeBatchSize, as Manager.Purge does.
	// Zero (the default) for no scheduled purge. The scheduled jobs run on
	// one relay of the fleet at a time, the holder of a lease in
	// outbox_leases (migration 5; Start refuses an older schema), and
	// report to HookPurge, HookLeaderLease and HookDeadLetterRetry.
	PurgeAfter time.Duration
	// PurgeFailedAfter, when positive, makes the leading relay delete
	// dead-lettered events that failed longer ago than this. Zero (the
	// default) keeps them.
	PurgeFailedAfter time.Duration
	// PurgeInterval is how often the leading relay purges; with
	// OrderingAggregate on MySQL/MariaDB it also prunes outbox_keys that
	// often, purge or not. Defaults to PurgeIntervalDefault when a
	// scheduled job is enabled or Ordering is OrderingAggregate.
	PurgeInterval time.Duration
	// PurgeBatchSize is how many rows one statement of a scheduled job
	// deletes or changes. Defaults to PurgeBatchSizeDefault.
	PurgeBatchSize int
	// DeadLetterRetry, when positive, makes the leading relay send each
	// dead-lettered event back to pending this long after it noticed it,
	// with its attempts reset (a fresh fast-backoff cycle), at most
	// DeadLetterRetries times. Zero (the default) for no slow retry.
	DeadLetterRetry time.Duration
	// DeadLetterRetries bounds the slow retries of one event. Defaults to
	// DeadLetterRetriesDefault when DeadLetterRetry is set.
	DeadLetterRetries int
	// ScheduleLease is the length of the job lease; a relay that stops
	// gives it up at once, one that dies holds it this long. Defaults to
	// ScheduleLeaseDefault when a scheduled job is enabled.
	ScheduleLease time.Duration
	// ProbeInterval is how long after the sink became unreachable (a batch
	// failed with connection-level errors, see Unavailable) the relay first
	// probes it; the delay doubles after each failed probe, up to
	// ProbeIntervalMax. Until a probe passes the relay claims nothing and
	// spends no attempts. Default to ProbeIntervalDefault and
	// ProbeIntervalMaxDefault.
	ProbeInterval    time.Duration
	ProbeIntervalMax time.Duration
	// SummaryInterval is how often the relay logs an INFO summary of what
	// it published, retried, dead-lettered and released (an idle interval
	// logs nothing), and once more when it stops, for what the last interval
	// did. Defaults to SummaryIntervalDefault; negative turns the
	// summary off.
	SummaryInterval time.Duration
	// HeartbeatInterval is how often the relay renews its row in
	// outbox_relays, the table of running relays that the dashboard, the
	// admin API and outbox stats list, idle relays included. The row
	// counts as stale once three intervals pass without a renewal (the
	// relay was killed, hangs or lost the database); a graceful stop
	// deletes it. The renewal rides on the lease rescue's timer, off the
	// claim path. Defaults to HeartbeatIntervalDefault; negative turns the
	// heartbeat off. Needs migration 006; on an older schema the relay
	// warns and runs without it.
	HeartbeatInterval time.Duration
	// SinkName names the sink in the heartbeat row. Never put a password
	// or token in it (a URL's user information and query are dropped all
	// the same). Defaults to the sink's String method when it has one,
	// which every sink of this module has and which names its endpoint
	// without credentials, or else to the sink's Go type.
	SinkName string
	// Version is the program's version in the heartbeat row. Defaults to
	// the outbox module's version in the program's build information.
	Version string
	// Logger receives the relay's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Hooks observe the relay; each may implement any of the Hook
	// interfaces (HookBatch, HookDeadLetter, HookPublish, HookRescue,
	// HookPurge, HookLeaderLease, HookDeadLetterRetry, HookSinkState).
	Hooks []Hook
	// Tenant, when set, is stamped on every claimed event as Event.Tenant,
	// which makes Event.UniqueID (the id brokers and consumers drop
	// duplicates on) qualified by it. Tenants sets it to the schema of
	// each relay it runs; set it for a relay of your own only when several
	// relays with different schemas publish into one destination.
	Tenant string
	// Database, when set, is stamped on every claimed event as
	// Event.Database, and qualifies Event.UniqueID further; Tenants sets it
	// when it serves several databases. Never put credentials in it.
	Database string
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c RelayConfig) WithDefaults() RelayConfig {
	c.Schema = schemaOrDefault(c.Schema)
	if c.RelayID == "" {
		c.RelayID = DefaultRelayID()
	}
	c.Retention = cmp.Or(c.Retention, RetainProcessed)
	c.Ordering = cmp.Or(c.Ordering, OrderingNone)
	c.OrderedFailure = cmp.Or(c.OrderedFailure, OrderedFailureBlock)
	c.Leases = cmp.Or(c.Leases, LeasesAuto)
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.Workers = cmp.Or(c.Workers, WorkersDefault)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, max(MaxInFlightDefault, c.Workers))
	c.MaxInFlightBytes = cmp.Or(c.MaxInFlightBytes, MaxInFlightBytesDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.Lease = cmp.Or(c.Lease, LeaseDefault)
	c.SinkTimeout = cmp.Or(c.SinkTimeout, min(SinkTimeoutDefault, c.Lease/2))
	c.DBTimeout = cmp.Or(c.DBTimeout, min(DBTimeoutDefault, c.Lease/2))
	c.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
	c.BackoffBase = cmp.Or(c.BackoffBase, BackoffBaseDefault)
	c.BackoffMax = cmp.Or(c.BackoffMax, BackoffMaxDefault)
	c.RescueInterval = cmp.Or(c.RescueInterval, min(max(c.Lease/4, time.Second), 15*time.Second))
	c.ProbeInterval = cmp.Or(c.ProbeInterval, ProbeIntervalDefault)
	c.ProbeIntervalMax = cmp.Or(c.ProbeIntervalMax, max(ProbeIntervalMaxDefault, c.ProbeInterval))
	c.SummaryInterval = cmp.Or(c.SummaryInterval, SummaryIntervalDefault)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, HeartbeatIntervalDefault)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, min(c.SinkTimeout+5*time.Second, max(c.Lease-time.Second, c.Lease/2)))
	c.scheduleDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first invalid field as a *ConfigError.
func (c RelayConfig) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case c.Sink == nil:
		return bad("Sink", "is nil: the relay needs a sink to publish to")
	case c.BatchSize < 1 || c.BatchSize > BatchSizeMax:
		return bad("BatchSize", "is %d: use 1 to %d", c.BatchSize, BatchSizeMax)
	case c.MaxBatchBytes < 0:
		return bad("MaxBatchBytes", "is %d: use a positive number of bytes, or 0 for no bound", c.MaxBatchBytes)
	case c.Workers < 1 || c.Workers > WorkersMax:
		return bad("Workers", "is %d: use 1 to %d", c.Workers, WorkersMax)
	case c.MaxInFlight < c.Workers || c.MaxInFlight > MaxInFlightMax:
		return bad("MaxInFlight", "is %d with %d workers: use %d to %d, since every claim loop needs a batch of its own", c.MaxInFlight, c.Workers, c.Workers, MaxInFlightMax)
	case c.MaxInFlightBytes < 0:
		return bad("MaxInFlightBytes", "is %d: use a positive number of bytes, or 0 for the default %d", c.MaxInFlightBytes, MaxInFlightBytesDefault)
	case c.PollInterval <= 0:
		return bad("PollInterval", "is %v: use a positive duration", c.PollInterval)
	case c.Lease < time.Second:
		return bad("Lease", "is %v: use at least 1s", c.Lease)
	case c.SinkTimeout <= 0:
		return bad("SinkTimeout", "is %v: use a positive duration", c.SinkTimeout)
	case c.SinkTimeout >= c.Lease:
		return bad("SinkTimeout", "is %v, not shorter than the lease (%v): a publish could outlive its lease and be duplicated; lower the sink timeout or raise the lease", c.SinkTimeout, c.Lease)
	case c.DBTimeout <= 0:
		return bad("DBTimeout", "is %v: use a positive duration", c.DBTimeout)
	case c.DBTimeout >= c.Lease:
		return bad("DBTimeout", "is %v, not shorter than the lease (%v): a claim could return events whose lease already ended; lower it", c.DBTimeout, c.Lease)
	case c.MaxAttempts < 1:
		return bad("MaxAttempts", "is %d: use at least 1", c.MaxAttempts)
	case c.CaptureSlot != "" && (c.MaxBatchBytes > 0 || c.Ordering == OrderingAggregate):
		return bad("CaptureSlot", "is set with MaxBatchBytes or aggregate ordering: the table path of a capture relay claims without a byte budget, and the stream delivers in commit order already; remove them")
	case c.BackoffBase <= 0:
		return bad("BackoffBase", "is %v: use a positive duration", c.BackoffBase)
	case c.BackoffMax < c.BackoffBase:
		return bad("BackoffMax", "is %v, less than BackoffBase (%v)", c.BackoffMax, c.BackoffBase)
	case c.BackoffMax > BackoffMaxLimit:
		return bad("BackoffMax", "is %v: use at most %v (BackoffMaxLimit)", c.BackoffMax, BackoffMaxLimit)
	case c.MaxAttempts > MaxAttemptsLimit:
		return bad("MaxAttempts", "is %d: use at most %d", c.MaxAttempts, MaxAttemptsLimit)
	case c.RescueInterval <= 0:
		return bad("RescueInterval", "is %v: use a positive duration", c.RescueInterval)
	case c.ShutdownTimeout <= 0:
		return bad("ShutdownTimeout", "is %v: use a positive duration", c.ShutdownTimeout)
	case c.ShutdownTimeout >= c.Lease:
		return bad("ShutdownTimeout", "is %v, not shorter than the lease (%v): a stopping relay would hold leases past their end; lower it", c.ShutdownTimeout, c.Lease)
	case c.ProbeInterval <= 0:
		return bad("ProbeInterval", "is %v: use a positive duration", c.ProbeInterval)
	case c.ProbeIntervalMax < c.ProbeInterval:
		return bad("ProbeIntervalMax", "is %v, less than ProbeInterval (%v)", c.ProbeIntervalMax, c.ProbeInterval)
	case c.RelayID == "":
		return bad("RelayID", "is empty")
	case len(c.RelayID) > relayIDMaxLen || errtext.Sanitize(c.RelayID, relayIDMaxLen) != c.RelayID:
		// It is stored in locked_by (VARCHAR(255) on MySQL) and in
		// last_error: the database must take it.
		return bad("RelayID", "%q is not valid UTF-8 without NUL bytes of at most %d bytes", c.RelayID, relayIDMaxLen)
	case c.Listen && c.PgBouncer:
		return bad("Listen", "is set with PgBouncer: a pooler in transaction mode keeps no LISTEN session; the relay polls (lower PollInterval for lower latency)")
	}
	if _, err := ParseRetention(string(c.Retention)); err != nil {
		return err
	}
	if err := c.validateOrdering(); err != nil {
		return err
	}
	if err := c.validateLeases(); err != nil {
		return err
	}
	if err := c.validateSchedule(); err != nil {
		return err
	}
	for i, p := range c.EventTypes {
		if p == "" {
			return bad("EventTypes", "entry %d is empty: use * to match every type", i)
		}
		if err := checkText(p, false); err != nil {
			return bad("EventTypes", "entry %d %v", i, err)
		}
	}
	for i, h := range c.Hooks {
		if h == nil {
			return bad("Hooks", "entry %d is nil", i)
		}
		_, isBatch := h.(HookBatch)
		_, isDead := h.(HookDeadLetter)
		_, isPublish := h.(HookPublish)
		_, isRescue := h.(HookRescue)
		_, isSinkState := h.(HookSinkState)
		if !isBatch && !isDead && !isPublish && !isRescue && !isSinkState && !isScheduleHook(h) {
			return bad("Hooks", "entry %d (%T) implements no hook interface", i, h)
		}
	}
	return nil
}

// relayIDMaxLen bounds RelayID: MySQL's locked_by holds 255 characters.
const relayIDMaxLen = 255

// DefaultRelayID returns hostname:pid.
func DefaultRelayID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "relay"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

var errStopped = errors.New("relay stopped")

// errCircuitOpen is the result of events claimed as the sink's circuit
// opened: they go back unpublished.
var errCircuitOpen = errors.New("not sent: the sink is unreachable (circuit open)")

// errSuspectWaits is the result of a suspect claimed while other batches
// were in flight: it goes back unpublished, to be claimed again once
// nothing else is in flight (relay_pipeline.go).
var errSuspectWaits = errors.New("not sent: an event in flight when a relay died goes out with nothing else in flight")
