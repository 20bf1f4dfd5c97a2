package outbox

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/mysqldriver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/driver/sqldriver"
	"github.com/outboxkit/outbox/internal/driver/sqlitedriver"
)

// Message is one event to write into the outbox.
type Message struct {
	// EventType names what happened, such as "order.created". Required.
	EventType string
	// AggregateType and AggregateID name the entity the event is about.
	// Brokers that partition (Kafka) key on AggregateID.
	AggregateType string
	AggregateID   string
	// Payload is the event's data. []byte and json.RawMessage are stored as
	// they are and must be valid JSON; any other value is marshalled with
	// encoding/json.
	Payload any
	// Headers are carried with the event to the sink (broker headers,
	// CloudEvents extension attributes).
	Headers map[string]string
	// CorrelationID, CausationID and SchemaVersion are stored in Headers
	// under correlation_id, causation_id and schema_version.
	CorrelationID string
	CausationID   string
	SchemaVersion string
	// IdempotencyKey, when set, makes the write skip this message if an
	// event with the same key exists. See IdempotencyKey for the classic
	// deterministic key.
	IdempotencyKey string
	// Delay holds the event back for this long after the transaction's
	// start, by the database clock.
	Delay time.Duration
	// AvailableAt, when set, is when the event becomes due; it overrides
	// Delay.
	AvailableAt time.Time
	// MaxAttempts overrides the relay's limit on failed publishes for this
	// event; 0 uses the relay's.
	MaxAttempts int
}

// IdempotencyKey returns the deterministic key
// aggregateType:aggregateID:eventType:YYYY-MM-DD, with the date of t in UTC:
// the same business event on the same day is written once however often the
// code that writes it runs.
func IdempotencyKey(aggregateType, aggregateID, eventType string, t time.Time) string {
	return aggregateType + ":" + aggregateID + ":" + eventType + ":" + t.UTC().Format(time.DateOnly)
}

// WriteResult reports what a write stored.
type WriteResult struct {
	// IDs has one entry per message, in order: the new event's ID, or 0 for
	// a message skipped as a duplicate.
	IDs []int64
	// Duplicates lists the positions of messages skipped because an event
	// with their idempotency key already exists.
	Duplicates []int
}

// PgxTx is what Writer.Write needs from a transaction: pgx.Tx, pgx.Conn and
// pgxpool.Pool all have it.
type PgxTx interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// SQLTx is what Writer.WriteSQL needs from a transaction: *sql.Tx (and
// *sql.DB, *sql.Conn) of the database the Writer's Dialect names; on
// PostgreSQL, opened with the pgx stdlib driver. DialectMySQL also needs
// ExecContext, which those types have.
type SQLTx interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// WriterConfig configures a Writer.
type WriterConfig struct {
	// Schema holds outbox_events. Defaults to SchemaDefault, which on
	// SQLite means the main database and on MySQL the connection's
	// database.
	Schema string
	// Dialect is the SQL of the database the caller's transactions run on.
	// Defaults to DialectDefault (PostgreSQL); DialectOf tells the one that
	// suits a Database.
	Dialect Dialect
	// HeadersFromContext, when set, is called once per write; the headers
	// it returns are added to every message that does not set them itself.
	// A tracing adapter uses it to store the caller's trace context
	// (traceparent, tracestate) with each event.
	HeadersFromContext func(ctx context.Context) map[string]string
	// NotifyInterval, when positive, makes writes wake relays that listen
	// (RelayConfig.Listen) through PostgreSQL NOTIFY, sent in the same
	// statement as the insert and delivered at commit. At most one write per
	// interval notifies: NOTIFY serializes the commits that carry it, so a
	// debounced hint keeps its cost to the writers small, while the relay's
	// trailing claims (5ms after events, and 50ms after the first empty
	// claim) pick up the events written in between; one that commits later
	// still waits for the relay's poll. Zero (the
	// default) never notifies. NotifyIntervalDefault is a good value. Only
	// PostgreSQL has NOTIFY; other dialects ignore it.
	NotifyInterval time.Duration
	// MaxPayloadBytes, when positive, refuses a message whose encoded
	// payload is larger, with a *MessageError wrapping ErrPayloadTooLarge,
	// before anything is sent. Zero (the default) sets no bound.
	MaxPayloadBytes int
}

// NotifyIntervalDefault is a NotifyInterval that keeps commit→publish
// latency in single milliseconds at a negligible cost to writers.
const NotifyIntervalDefault = 5 * time.Millisecond

// Writer writes events into the outbox inside the caller's transaction, so
// they commit or roll back with the business rows beside them. It is safe for
// concurrent use.
type Writer struct {
	dialect        Dialect
	insert         pgdriver.Insert    // DialectPostgres
	sqlInsert      sqldriver.Inserter // the other dialects
	dialectErr     error              // an unknown dialect, reported by every write
	fromContext    func(context.Context) map[string]string
	notifyInterval int64        // nanoseconds; 0 disables
	maxPayload     int          // bytes; 0 for no bound
	lastNotify     atomic.Int64 // unix nanoseconds of the last notifying write
}

// NewWriter returns a Writer for the outbox table in cfg.Schema.
// An unknown cfg.Dialect makes every write return a *ConfigError.
func NewWriter(cfg WriterConfig) *Writer {
	schema := schemaOrDefault(cfg.Schema)
	w := &Writer{dialect: cmp.Or(cfg.Dialect, DialectDefault), fromContext: cfg.HeadersFromContext,
		maxPayload: max(cfg.MaxPayloadBytes, 0)}
	switch w.dialect {
	case DialectPostgres:
		w.insert = pgdriver.NewInsert(schema)
		w.notifyInterval = int64(max(cfg.NotifyInterval, 0))
	case DialectSQLite:
		w.sqlInsert = sqlitedriver.NewInsert(schema)
	case DialectMariaDB:
		w.sqlInsert = mysqldriver.NewInsertReturning(schema)
	case DialectMySQL:
		w.sqlInsert = mysqldriver.NewInsertEach(schema)
	default:
		_, w.dialectErr = ParseDialect(string(w.dialect))
	}
	return w
}

// Write stores msgs in tx with one round trip. A message whose idempotency
// key already exists is skipped and reported in WriteResult.Duplicates; it
// does not abort tx. Invalid messages are refused with a *MessageError before
// anything is sent.
//
// Write is for PostgreSQL (DialectPostgres); the other dialects write
// through WriteSQL.
func (w *Writer) Write(ctx context.Context, tx PgxTx, msgs ...Message) (WriteResult, error) {
	if w.dialect != DialectPostgres {
		if w.dialectErr != nil {
			return WriteResult{}, w.dialectErr
		}
		return WriteResult{}, &ConfigError{Field: "Dialect", Err: fmt.Errorf(
			"is %s: Write takes a pgx transaction, which only PostgreSQL has; use WriteSQL with a *sql.Tx", w.dialect)}
	}
	events, err := w.prepare(ctx, msgs)
	if err != nil || len(events) == 0 {
		return WriteResult{}, err
	}
	sqlText, args := w.statement(events)
	rows, err := tx.Query(ctx, sqlText, args...)
	if err != nil {
		return WriteResult{}, writeErr(err)
	}
	defer rows.Close()
	return collectIDs(len(msgs), rows)
}

// WriteSQL is Write for a database/sql transaction: on PostgreSQL through
// the pgx stdlib driver, on SQLite, MariaDB and MySQL through theirs, as the
// Writer's Dialect says. On every dialect a duplicate idempotency key is
// skipped without aborting tx, and IDs come back in message order.
func (w *Writer) WriteSQL(ctx context.Context, tx SQLTx, msgs ...Message) (WriteResult, error) {
	if w.dialectErr != nil {
		return WriteResult{}, w.dialectErr
	}
	events, err := w.prepare(ctx, msgs)
	if err != nil || len(events) == 0 {
		return WriteResult{}, err
	}
	if w.sqlInsert != nil {
		ids, err := w.sqlInsert.Insert(ctx, tx, events)
		if err != nil {
			return WriteResult{}, w.writeErr(err)
		}
		res := WriteResult{IDs: ids}
		for i, id := range ids {
			if id == 0 {
				res.Duplicates = append(res.Duplicates, i)
			}
		}
		return res, nil
	}
	sqlText, args := w.statement(events)
	rows, err := tx.QueryContext(ctx, sqlText, args...)
	if err != nil {
		return WriteResult{}, writeErr(err)
	}
	defer func() { _ = rows.Close() }()
	res, err := collectIDs(len(msgs), rows)
	if err != nil {
		return res, err
	}
	return res, writeErr(rows.Err())
}

// statement picks the insert, with a notification when one is due.
func (w *Writer) statement(events []driver.NewEvent) (string, []any) {
	args := w.insert.Args(events)
	if w.notifyInterval == 0 {
		return w.insert.SQL, args
	}
	now := time.Now().UnixNano()
	last := w.lastNotify.Load()
	if now-last < w.notifyInterval || !w.lastNotify.CompareAndSwap(last, now) {
		return w.insert.SQL, args
	}
	return w.insert.SQLNotify, append(args, w.insert.NotifyArgs()...)
}

// rowScanner is the part of pgx.Rows and *sql.Rows the writer reads.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// collectIDs reads (ordinal, id) rows; the caller closes rows.
func collectIDs(n int, rows rowScanner) (WriteResult, error) {
	res := WriteResult{IDs: make([]int64, n)}
	for rows.Next() {
		var ord, id int64
		if err := rows.Scan(&ord, &id); err != nil {
			return WriteResult{}, writeErr(err)
		}
		res.IDs[ord-1] = id
	}
	if err := rows.Err(); err != nil {
		return WriteResult{}, writeErr(err)
	}
	for i, id := range res.IDs {
		if id == 0 {
			res.Duplicates = append(res.Duplicates, i)
		}
	}
	return res, nil
}

func writeErr(err error) error {
	if err == nil {
		return nil
	}
	err = driverErr(err)
	if errors.Is(err, ErrNoTable) {
		return fmt.Errorf("write outbox events: %w (run outbox migrate)", err)
	}
	return fmt.Errorf("write outbox events: %w", err)
}

// driverErr maps database errors that name a missing table to ErrNoTable.
func driverErr(err error) error { return pgdriver.WrapError(err) }

// writeErr is writeErr for the Writer's dialect.
func (w *Writer) writeErr(err error) error {
	switch w.dialect {
	case DialectSQLite:
		err = sqldriver.WrapError(sqlitedriver.Dialect{}, err)
	case DialectMariaDB, DialectMySQL:
		err = sqldriver.WrapError(mysqldriver.Dialect{}, err)
	}
	return writeErr(err)
}

// prepare validates msgs and encodes their payloads and headers.
func (w *Writer) prepare(ctx context.Context, msgs []Message) ([]driver.NewEvent, error) {
	var ctxHeaders map[string]string
	if w.fromContext != nil {
		ctxHeaders = w.fromContext(ctx)
	}
	events := make([]driver.NewEvent, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		if err := checkMessageText(i, m); err != nil {
			return nil, err
		}
		if m.MaxAttempts < 0 || m.MaxAttempts > MaxAttemptsLimit {
			return nil, &MessageError{Index: i, Field: "MaxAttempts", Err: fmt.Errorf("is %d: use 1 to %d, or 0 for the relay default", m.MaxAttempts, MaxAttemptsLimit)}
		}
		if m.Delay < 0 {
			return nil, &MessageError{Index: i, Field: "Delay", Err: errors.New("is negative")}
		}
		payload, err := encodePayload(m.Payload)
		if err != nil {
			return nil, &MessageError{Index: i, Field: "Payload", Err: err}
		}
		if w.maxPayload > 0 && len(payload) > w.maxPayload {
			return nil, &MessageError{Index: i, Field: "Payload", Err: fmt.Errorf("%w: %d bytes, more than MaxPayloadBytes (%d): store large data elsewhere and send a reference",
				ErrPayloadTooLarge, len(payload), w.maxPayload)}
		}
		headers, err := encodeHeaders(m, ctxHeaders)
		if err != nil {
			return nil, &MessageError{Index: i, Field: "Headers", Err: err}
		}
		events[i] = driver.NewEvent{
			EventType: m.EventType, AggregateType: m.AggregateType, AggregateID: m.AggregateID,
			Payload: payload, Headers: headers, IdempotencyKey: m.IdempotencyKey,
			MaxAttempts: m.MaxAttempts, Delay: m.Delay, AvailableAt: m.AvailableAt,
		}
	}
	return events, nil
}

func encodePayload(p any) ([]byte, error) {
	var raw []byte
	switch v := p.(type) {
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	default:
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		return b, nil
	}
	if !json.Valid(raw) {
		return nil, errors.New("is not valid JSON: pass JSON bytes or a value to marshal")
	}
	return raw, nil
}

func encodeHeaders(m *Message, ctxHeaders map[string]string) ([]byte, error) {
	if len(m.Headers) == 0 && len(ctxHeaders) == 0 && m.CorrelationID == "" && m.CausationID == "" && m.SchemaVersion == "" {
		return []byte("{}"), nil
	}
	h := make(map[string]string, len(m.Headers)+len(ctxHeaders)+3)
	for k, v := range ctxHeaders {
		if k != "" && v != "" {
			h[k] = v
		}
	}
	for k, v := range m.Headers {
		if k == "" {
			return nil, errors.New("has an empty name")
		}
		h[k] = v
	}
	setIf(h, HeaderCorrelationID, m.CorrelationID)
	setIf(h, HeaderCausationID, m.CausationID)
	setIf(h, HeaderSchemaVersion, m.SchemaVersion)
	return json.Marshal(h)
}

func setIf(h map[string]string, k, v string) {
	if v != "" {
		h[k] = v
	}
}
