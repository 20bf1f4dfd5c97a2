// Package driver is the storage seam between the outbox engine and a
// database. The relay, the Manager (and so the CLI and the admin API) and
// the migrator speak only to Driver, and to Listener where a database can
// push wake-ups. Three drivers implement it, and the SQL of the outbox
// lives in them (only internal/bench keeps a hand-written loop of its own,
// as a yardstick):
//
//   - pgdriver: PostgreSQL on pgx v5, with LISTEN/NOTIFY (Listener);
//   - sqldriver with the dialect sqlitedriver: SQLite through database/sql;
//   - sqldriver with the dialect mysqldriver: MySQL 8 and MariaDB 10.6+
//     through database/sql.
//
// The writer runs in the caller's transaction, not on a Driver: it takes
// its insert statement from the driver package of its dialect. Every driver
// passes the conformance suite in drivertest.
package driver

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Status values stored in outbox_events.status.
const (
	StatusPending    = "pending"
	StatusProcessing = "processing"
	StatusProcessed  = "processed"
	StatusFailed     = "failed"
)

// Retention says what happens to a delivered event's row.
type Retention string

// Retention modes.
const (
	// RetainProcessed keeps the row with status processed (history in the
	// table; purge trims it).
	RetainProcessed Retention = "processed"
	// RetainDelete deletes the row once the sink acknowledged it.
	RetainDelete Retention = "delete"
	// RetainArchive moves the row to outbox_events_archive.
	RetainArchive Retention = "archive"
)

// ErrNotFound is returned when an event does not exist.
var ErrNotFound = errors.New("event not found")

// ErrNoTable is returned when the outbox table does not exist in the schema.
var ErrNoTable = errors.New("outbox table not found")

// ErrDataRefused wraps an error by which the database refused a statement
// for the data it carries, not for the connection or the server's state: a
// data exception or an integrity constraint violation (SQLSTATE classes 22
// and 23; on MySQL 1062, 1366 and their kin; SQLite's constraint, too-big
// and mismatch errors). The same statement fails again however often it
// is retried; the relay settles such a batch row by row instead.
var ErrDataRefused = errors.New("the database refused the data")

// ErrReadOnly is returned, wrapped with the database's own error, when the
// database refuses a write because it is read-only: a demoted primary, a
// standby, default_transaction_read_only, MySQL's read_only, a SQLite file
// opened read-only. Retrying later is right; the event is not at fault.
var ErrReadOnly = errors.New("database is read-only")

// ReadOnlyError wraps err, the database's refusal to write, so that
// errors.Is(err, ErrReadOnly) holds and the database's message is kept.
func ReadOnlyError(err error) error { return fmt.Errorf("%w: %w", ErrReadOnly, err) }

// Event is one row of outbox_events.
type Event struct {
	ID             int64
	EventType      string
	AggregateType  string
	AggregateID    string
	Payload        []byte
	Headers        map[string]string
	IdempotencyKey string
	Status         string
	Attempts       int
	MaxAttempts    int // 0 when the row leaves it to the relay's default
	// LeaseExpiries counts the claims that ended in a lease expiry (each
	// also counted in Attempts); an event with any is claimed alone. Read
	// by PostgreSQL's partition read, not by its row-lease claim.
	LeaseExpiries int
	LastError     string
	AvailableAt   time.Time
	LockedUntil   time.Time
	LockedBy      string
	CreatedAt     time.Time
	UpdatedAt     time.Time
	ProcessedAt   time.Time
}

// NewEvent is one event to insert.
type NewEvent struct {
	EventType      string
	AggregateType  string
	AggregateID    string
	Payload        []byte // valid JSON
	Headers        []byte // a JSON object
	IdempotencyKey string // empty for none
	MaxAttempts    int    // 0 for the relay default
	Delay          time.Duration
	AvailableAt    time.Time // zero for now() + Delay
}

// ClaimParams selects and leases a batch.
type ClaimParams struct {
	RelayID   string
	BatchSize int
	Lease     time.Duration
	// EventTypes, when not empty, limits the claim to event types matching
	// one of these patterns (* matches any run of characters).
	EventTypes []string
	// MaxBytes, when positive, bounds the payload and header bytes of one
	// claim, as the database stores them (PostgreSQL compresses large
	// values): events are taken in claim order while the total stays
	// within it, and the first one always, however large, so that no event
	// is stuck. Zero for no bound.
	MaxBytes int64
	// CaptureSlot, when not empty, makes the claim the table path of the
	// change-data-capture relay streaming from this replication slot
	// (PostgreSQL only): it takes only the events the stream leaves to the
	// table, those written before the slot existed (visible in the
	// snapshot recorded with it in outbox_capture), those written with a
	// delay, and those whose row changed since it was written (a failed
	// publish, a requeue), and the stream's rows it missed (the safety
	// net). It looks only at the oldest due pending rows, ten batches and
	// at least 1,000, so that the stream's backlog does not make every
	// claim read all of it.
	CaptureSlot string
}

// Claim is a leased batch. LockedUntil is the lease's end as the database
// set it; together with the relay ID it fences every later mark, so a relay
// whose lease expired cannot overwrite a row another relay re-claimed.
type Claim struct {
	Events      []Event
	LockedUntil time.Time
	// Lease, when positive, is how much of the lease was left when the
	// database read the batch (a partition read: PartitionClaimer); zero
	// means the whole configured lease, as a row-lease claim sets it.
	Lease time.Duration
	// Parts and Fences are, for a partition read, the partitions the batch
	// came from and the fence each was read under; nil for a row lease.
	Parts  []int32
	Fences []int64
	// InFlight: the read recorded the batch on its partitions as in flight
	// (PartitionClaimParams.RecordInFlight).
	InFlight bool
	// Capped, for a partition read, lists the batch's partitions that gave
	// it PartitionClaimParams.PerPartition events (when below BatchSize),
	// counted after the cut: they may hold more.
	Capped []int32
	// Cut: a partition read left events out for a suspect or the byte
	// budget (PartitionClaimParams.MaxBytes), so it is short for that.
	Cut bool
	// Held: an ordered claim or partition read found no event, and left
	// committed events (of the relay's partitions) out because an older
	// transaction was still running (its horizon); they are likely
	// readable within milliseconds.
	Held bool
}

// Fence identifies the lease a mark must still hold to take effect: the
// rows' own lease (RelayID, LockedUntil), or, when Parts is not empty, the
// leases of those partitions with those fences (PartitionClaimer).
type Fence struct {
	RelayID     string
	LockedUntil time.Time
	Parts       []int32
	Fences      []int64
	// InFlight is Claim.InFlight: a release of the batch clears the
	// record, since the events it hands back were not published.
	InFlight bool
}

// Failure is one event's failed publish.
type Failure struct {
	ID        int64
	Error     string
	Permanent bool          // dead-letter at once
	Delay     time.Duration // backoff before the next attempt
}

// FailResult reports what a failure mark did.
type FailResult struct {
	Retried []int64 // back to pending with a backoff
	Dead    []int64 // moved to failed
}

// RescueParams selects expired leases to rescue.
type RescueParams struct {
	// Limit bounds the rows one rescue changes.
	Limit int
	// MaxAttempts is the limit for rows without max_attempts of their own:
	// a rescue counts the expiry as an attempt and dead-letters an event
	// that has run out of them.
	MaxAttempts int
}

// RescueResult reports what a rescue did.
type RescueResult struct {
	// Rescued went back to pending, due at once; as suspects, each is
	// claimed alone from now on.
	Rescued []int64
	// Dead ran out of attempts and moved to failed, read after the change.
	Dead []Event
}

// Stats are the counts an operator looks at first.
type Stats struct {
	Pending    int64
	Processing int64
	Processed  int64
	Failed     int64
	// OldestPendingAge is the age of the oldest due pending event, zero when
	// none is due.
	OldestPendingAge time.Duration
}

// ListParams filters and pages an event listing, newest first.
type ListParams struct {
	Status        string
	EventType     string
	AggregateType string
	AggregateID   string
	BeforeID      int64 // keyset: only events with a smaller ID; 0 for no bound
	Limit         int
}

// PurgeParams selects finished events to delete.
type PurgeParams struct {
	Status    string        // processed or failed
	OlderThan time.Duration // finished at least this long ago, by the database clock
	BatchSize int
}

// Migration names one schema change.
type Migration struct {
	Version int
	Name    string
}

// Driver is an outbox table in one schema of one database.
type Driver interface {
	// Migrate applies missing migrations under a lock that serializes
	// concurrent migrators, and returns the ones it applied.
	Migrate(ctx context.Context) ([]Migration, error)
	// MigrationSQL returns every migration as one script.
	MigrationSQL() string
	// Migrations lists every migration the driver knows.
	Migrations() []Migration
	// SchemaVersion returns the highest applied migration, 0 for none.
	SchemaVersion(ctx context.Context) (int, error)

	// Ping checks that the database answers and the outbox table exists
	// (ErrNoTable otherwise).
	Ping(ctx context.Context) error

	// Claim leases up to BatchSize due pending events.
	Claim(ctx context.Context, p ClaimParams) (Claim, error)
	// MarkProcessed marks published events processed, deletes them or
	// archives them, per retention; it returns how many rows still held the
	// fence.
	MarkProcessed(ctx context.Context, f Fence, ids []int64, retention Retention) (int64, error)
	// MarkFailed records failed publishes: attempts+1, last_error, then
	// pending after the delay or failed at max attempts (maxAttempts is the
	// default for rows without their own) or at once when permanent.
	MarkFailed(ctx context.Context, f Fence, maxAttempts int, failures []Failure) (FailResult, error)
	// Release returns events to pending without spending an attempt.
	Release(ctx context.Context, f Fence, ids []int64) (int64, error)
	// RescueExpired settles up to p.Limit events whose lease expired: it
	// counts the expiry in attempts and lease_expiries, keeps last_error
	// and appends a note of the expiry to it (Expired.Rescue), and returns
	// each event to pending, or moves it to failed once it has run out of
	// attempts.
	RescueExpired(ctx context.Context, p RescueParams) (RescueResult, error)

	// Stats counts events per status.
	Stats(ctx context.Context) (Stats, error)
	// EstimateStats is Stats without scanning processed rows: pending,
	// processing and failed are exact (their partial indexes are small),
	// processed is the planner's estimate. It is cheap enough to run on
	// every metrics scrape.
	EstimateStats(ctx context.Context) (Stats, error)
	// ListEvents lists events, newest first.
	ListEvents(ctx context.Context, p ListParams) ([]Event, error)
	// GetEvent returns one event or ErrNotFound.
	GetEvent(ctx context.Context, id int64) (Event, error)
	// Requeue sets the given events whose status is one of from back to
	// pending, due now, with attempts reset; it returns the IDs it changed.
	Requeue(ctx context.Context, ids []int64, from []string) ([]int64, error)
	// RequeueStatus requeues up to limit events with the given status and an
	// ID above afterID, in ID order; it returns how many it changed and the
	// highest ID it looked at, for the next call.
	RequeueStatus(ctx context.Context, status string, afterID int64, limit int) (n int64, lastID int64, err error)
	// PurgeBatch deletes one batch of finished events and returns how many.
	PurgeBatch(ctx context.Context, p PurgeParams) (int64, error)
	// PurgeArchiveBatch deletes one batch of archived events processed more
	// than olderThan ago and returns how many.
	PurgeArchiveBatch(ctx context.Context, olderThan time.Duration, batchSize int) (int64, error)

	// Admin holds the admin API's searches and actions (admin.go).
	Admin
	// Scheduler holds the job lease and the dead-letter slow retry
	// (schedule.go).
	Scheduler
	// Heartbeats holds the relays' heartbeat rows (relays.go).
	Heartbeats
}

// ErrPooler is returned, wrapped, when the database is reached through a
// connection pooler that hands each transaction to another server session
// (PgBouncer in transaction mode) but the connection is configured for a
// session of its own (prepared statements, startup parameters, LISTEN).
var ErrPooler = errors.New("connection pooler in the way")

// PoolerInfo is what PoolerChecker found out.
type PoolerInfo struct {
	// Pooled reports that the connection reaches the database through a
	// pooler: the server session answering is not the one the connection
	// was given at its start.
	Pooled bool
	// SessionState names what the connection's configuration keeps in a
	// server session, which a pooler in transaction mode would lose or mix
	// up ("named prepared statements", "the startup parameter X").
	SessionState []string
}

// PoolerChecker is implemented by drivers whose connections may pass
// through a connection pooler (PostgreSQL behind PgBouncer).
type PoolerChecker interface {
	// CheckPooler connects and reports whether a pooler is in the way and
	// what session state the driver's configuration relies on.
	CheckPooler(ctx context.Context) (PoolerInfo, error)
}

// Listener is implemented by drivers whose database can push a wake-up when
// events are written (PostgreSQL LISTEN/NOTIFY).
type Listener interface {
	// Listen calls wake for each notification about this driver's schema
	// until ctx ends, reconnecting after errors (reported to onErr).
	Listen(ctx context.Context, wake func(), onErr func(error))
}

// TenantDiscoverer is implemented by drivers whose database can hold one
// outbox per schema (tenant), served by one relay process: PostgreSQL, and
// MySQL/MariaDB, where a tenant is a database on the server.
type TenantDiscoverer interface {
	// UserSchemas returns, sorted, every schema but the database's own
	// catalogs (pg_*, information_schema): the candidates to migrate.
	UserSchemas(ctx context.Context) ([]string, error)
	// OutboxSchemas returns, sorted, the schemas that hold an outbox_events
	// table the connection's role may use.
	OutboxSchemas(ctx context.Context) ([]string, error)
	// QuerySchemas runs query, an operator's SELECT, and returns the first
	// column of its rows as text, in order, duplicates dropped.
	QuerySchemas(ctx context.Context, query string) ([]string, error)
	// DueSchemas returns those of schemas whose outbox holds a pending
	// event that is due, and those holding an event whose lease expired
	// (its relay died: a rescue is due), in one statement per few hundred
	// schemas. A schema whose table vanished makes the call fail.
	DueSchemas(ctx context.Context, schemas []string) (due, expired []string, err error)
	// CloseScan releases what DueSchemas keeps between calls.
	CloseScan()
	// ListenSchemas calls wake with the schema each writer's notification
	// names, on one connection for the whole database, until ctx ends.
	ListenSchemas(ctx context.Context, wake func(schema string), connected func(), onErr func(error))
}

// ReplicationSlot is what the server says of a capture relay's logical
// replication slot (pg_replication_slots), with the lease row of the relay
// streaming from it. A pointer is nil where the server does not report
// the figure.
type ReplicationSlot struct {
	Name string
	// Exists is false for a slot recorded in outbox_capture that the
	// server no longer has (dropped by hand, or lost in a failover).
	Exists    bool
	Active    bool
	ActivePID *int64
	// RetainedBytes is the WAL the slot keeps on the server's disk (from
	// restart_lsn to the current position); UnconfirmedBytes the WAL
	// written since confirmed_flush_lsn.
	RetainedBytes, UnconfirmedBytes *int64
	ConfirmedFlushLSN               string
	// WALStatus and SafeWALSize are pg_replication_slots.wal_status and
	// safe_wal_size (PostgreSQL 13 and later; safe_wal_size is NULL
	// without max_slot_wal_keep_size).
	WALStatus   *string
	SafeWALSize *int64
	// Holder is the relay named by the slot's lease row (capture:<slot>
	// in outbox_leases), "" for none; HolderUntil is when that row
	// expires by the database clock (zero for none), HolderExpired
	// whether it already did.
	Holder        string
	HolderUntil   time.Time
	HolderExpired bool
}

// CaptureSlots is a driver's answer about its capture slots: the slots,
// or, when the role may not read them, why.
type CaptureSlots struct {
	Slots []ReplicationSlot
	// Denied is the database's refusal (insufficient privilege), with
	// what to grant; empty when the slots were read.
	Denied string
}

// CaptureInspector is implemented by drivers whose database can feed a
// change-data-capture relay (PostgreSQL's logical replication).
type CaptureInspector interface {
	// ReplicationSlots reads the capture slots recorded for the schema.
	ReplicationSlots(ctx context.Context) (CaptureSlots, error)
}

// SchemaStats are one schema's counts, as TenantCounter returns them: what
// Stats and DeadLetterRetryStats of that schema's driver return.
type SchemaStats struct {
	Schema string
	Stats
	DeadLetterRetry DeadLetterRetryStats
}

// TenantCounter is implemented by drivers that count many schemas' outboxes
// at once, so that per-tenant stats cost a statement per few dozen
// tenants instead of one per tenant: PostgreSQL, MySQL and MariaDB.
type TenantCounter interface {
	// CountSchemas returns the counts of each schema, in the order of
	// schemas, counted as Stats and DeadLetterRetryStats count one schema.
	// A schema without its table, or migrated before the slow retry
	// existed, makes the call fail: count such schemas one at a time.
	CountSchemas(ctx context.Context, schemas []string) ([]SchemaStats, error)
}
