package outbox

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
)

// Status is an event's place in its lifecycle.
type Status string

// The statuses stored in outbox_events.status.
const (
	// StatusPending events wait to be claimed once available_at has passed.
	StatusPending Status = driver.StatusPending
	// StatusProcessing events are leased by a relay until locked_until.
	StatusProcessing Status = driver.StatusProcessing
	// StatusProcessed events were delivered to the sink.
	StatusProcessed Status = driver.StatusProcessed
	// StatusFailed events are dead-lettered: out of attempts or permanently
	// rejected by the sink. An operator retries them.
	StatusFailed Status = driver.StatusFailed
)

// ParseStatus returns the status named s, or an error listing the valid ones.
func ParseStatus(s string) (Status, error) {
	switch st := Status(s); st {
	case StatusPending, StatusProcessing, StatusProcessed, StatusFailed:
		return st, nil
	}
	return "", &ConfigError{Field: "status", Err: errUnknownStatus(s)}
}

// Event is a stored outbox event as the relay hands it to a sink and as the
// operator commands show it. A claim reads only what a sink needs, so in a
// sink LastError, UpdatedAt and ProcessedAt are zero, Status is
// StatusProcessing and LockedBy is the relay's ID.
type Event struct {
	// ID is the event's stable identity: it is the same on every delivery,
	// so consumers drop duplicates on it.
	ID             int64
	EventType      string
	AggregateType  string
	AggregateID    string
	Payload        json.RawMessage // the JSON payload as stored
	Headers        map[string]string
	IdempotencyKey string
	Status         Status
	// Attempts counts the claims that ended without delivery so far: failed
	// publishes and lease expiries.
	Attempts int
	// MaxAttempts is the event's own limit, or 0 for the relay's default.
	MaxAttempts int
	// LeaseExpiries counts the attempts that ended in a lease expiry: the
	// relay holding the event died or hung. An event with any is claimed
	// alone. A claim does not always read it: a sink must not rely on it.
	LeaseExpiries int
	LastError     string
	AvailableAt   time.Time
	LockedUntil   time.Time
	LockedBy      string
	CreatedAt     time.Time
	UpdatedAt     time.Time
	ProcessedAt   time.Time
	// Tenant is the schema the event was claimed from when the relay
	// serves several sources (tenant schemas, or several databases; see
	// Tenants), so a handler sink runs in the tenant's context and brokers
	// carry it (the CloudEvents extension attribute tenant). It is empty
	// for a relay that serves one schema.
	Tenant string
	// Database labels the database the event was claimed from (host/name,
	// never credentials) when the relay serves several databases; empty
	// otherwise. Brokers carry it as the extension attribute database.
	Database string
}

// UniqueID is the identity consumers and brokers drop duplicates on: the
// event's ID in decimal for a relay that serves one schema (as it always
// was), and the ID qualified by its source otherwise, since every schema
// and database has its own ID sequence: tenant:id when Tenant is set, and
// database:tenant:id when Database is set too. In a qualified ID each part
// is percent-encoded where it holds a colon, a percent sign, a space, a
// double quote or a byte outside printable ASCII, so the ID is one token
// that fits any header and two sources never share one.
func (e *Event) UniqueID() string {
	id := strconv.FormatInt(e.ID, 10)
	if e.Tenant == "" && e.Database == "" {
		return id
	}
	q := escapeIDPart(e.Tenant) + ":" + id
	if e.Database != "" {
		q = escapeIDPart(e.Database) + ":" + q
	}
	return q
}

// escapeIDPart percent-encodes the bytes of s that may not appear in one
// part of a qualified ID.
func escapeIDPart(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c == '"' || c == '%' || c == ':' || c >= 0x7f {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// Header names the writer sets from Message's first-class fields. Sinks carry
// them as CloudEvents extension attributes or broker headers.
const (
	HeaderCorrelationID = "correlation_id"
	HeaderCausationID   = "causation_id"
	HeaderSchemaVersion = "schema_version"
	HeaderTraceParent   = "traceparent"
	HeaderTraceState    = "tracestate"
)

// CorrelationID returns the event's correlation ID header.
func (e *Event) CorrelationID() string { return e.Headers[HeaderCorrelationID] }

// CausationID returns the event's causation ID header.
func (e *Event) CausationID() string { return e.Headers[HeaderCausationID] }

// SchemaVersion returns the event's schema version header.
func (e *Event) SchemaVersion() string { return e.Headers[HeaderSchemaVersion] }

func eventFromRow(r *driver.Event) Event {
	return Event{
		ID: r.ID, EventType: r.EventType, AggregateType: r.AggregateType, AggregateID: r.AggregateID,
		Payload: r.Payload, Headers: r.Headers, IdempotencyKey: r.IdempotencyKey,
		Status: Status(r.Status), Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, LeaseExpiries: r.LeaseExpiries, LastError: r.LastError,
		AvailableAt: r.AvailableAt, LockedUntil: r.LockedUntil, LockedBy: r.LockedBy,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, ProcessedAt: r.ProcessedAt,
	}
}

func eventsFromRows(rows []driver.Event) []Event {
	events := make([]Event, len(rows))
	for i := range rows {
		events[i] = eventFromRow(&rows[i])
	}
	return events
}

// Database is the database that holds the outbox table. Make one with
// Postgres, SQLite or MySQL; the relay, the Manager and outboxmigrate take
// it.
type Database interface {
	// Driver returns the storage driver for the outbox table in schema. It
	// is for outbox's own packages; applications have no use for it.
	Driver(schema string) driver.Driver
}

// Postgres returns the PostgreSQL database reached through pool.
//
// The relay runs short single statements on the pool. A pool made for the
// relay alone can name itself in pg_stat_activity: set
// config.ConnConfig.RuntimeParams["application_name"] before creating it (the
// outbox CLI uses "outbox-relay:<relay-id>").
func Postgres(pool *pgxpool.Pool) Database { return pgDatabase{pool: pool} }

type pgDatabase struct{ pool *pgxpool.Pool }

func (p pgDatabase) Driver(schema string) driver.Driver {
	return pgdriver.New(p.pool, schemaOrDefault(schema))
}

// ConfigureRelayPool prepares the configuration of a pool used by a relay
// alone: its connections show in pg_stat_activity as
// application_name outbox-relay:<relayID>, and its commits use
// synchronous_commit=off. The relay's claims and marks then do not wait for
// the WAL flush, which makes small batches much faster and leaves the disk
// to the application's writers; a mark lost in a database crash only means
// the event is published again, which at-least-once delivery allows. The
// events themselves are written by the application's transactions, with the
// application's durability.
//
// It also bounds each new connection by RelayConnectTimeout unless cfg sets
// a connect timeout (connect_timeout in the URL): pgxpool otherwise lets a
// connection attempt that met a silent network run for two minutes,
// holding a place in the pool.
func ConfigureRelayPool(cfg *pgxpool.Config, relayID string) {
	cfg.ConnConfig.RuntimeParams["application_name"] = "outbox-relay:" + relayID
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = RelayConnectTimeout
	}
}

// ConfigurePgBouncer prepares the configuration of a pool that reaches
// PostgreSQL through PgBouncer in transaction mode, which hands each
// transaction to whichever server connection is free, so nothing may rely
// on a session: statements run in pgx's exec mode (an unnamed statement,
// parsed and run in one round trip) instead of named prepared statements,
// and the startup parameters PgBouncer does not carry from one server
// connection to the next are dropped (synchronous_commit among them: the
// relay's marks then commit durably; to keep them asynchronous, set it for
// the relay's database role with ALTER ROLE … SET synchronous_commit =
// off). application_name stays: PgBouncer sets it on every server
// connection it lends. Call it after ConfigureRelayPool, and set
// RelayConfig.PgBouncer for a relay on the pool.
func ConfigurePgBouncer(cfg *pgxpool.Config) {
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	for k := range cfg.ConnConfig.RuntimeParams {
		switch strings.ToLower(k) {
		case "application_name", "client_encoding", "datestyle", "timezone", "standard_conforming_strings":
		default:
			delete(cfg.ConnConfig.RuntimeParams, k)
		}
	}
}

// RelayConnectTimeout bounds a new connection of a pool prepared with
// ConfigureRelayPool, unless its configuration sets a timeout of its own.
const RelayConnectTimeout = 10 * time.Second

// SchemaDefault is the schema that holds outbox_events unless configured.
const SchemaDefault = "public"

func schemaOrDefault(s string) string {
	if s == "" {
		return SchemaDefault
	}
	return s
}
