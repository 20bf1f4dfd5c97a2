package inbox

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/mysqldriver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/driver/sqldriver"
	"github.com/outboxkit/outbox/internal/driver/sqlitedriver"
)

// ConsumerDefault is the consumer name when Config.Consumer is empty.
const ConsumerDefault = "default"

// Limits on the key's parts, which MySQL's index bounds; the same on every
// database so that a consumer can move between them.
const (
	MaxConsumerLen  = 200
	MaxSourceLen    = 255
	MaxMessageIDLen = 255
)

// Message is one message a consumer received.
type Message struct {
	// Source names where the message came from: the CloudEvents source
	// (the webhook sink's ce-source, "/outbox" by default), a stream or a
	// topic. With ID it is the dedup key: event IDs are unique only within
	// one outbox table, so two outboxes feeding one consumer must differ
	// in Source. May be empty when the consumer reads one source only.
	Source string
	// ID is the message's identity, the same on every delivery: the
	// outbox event's ID (webhook-id, ce-id, the broker's message ID
	// header). Required.
	ID string
	// EventType is stored with the message, such as "order.created".
	EventType string
	// Payload is the message's JSON data, stored as it is; empty stores
	// JSON null.
	Payload json.RawMessage
	// Headers are stored with the message (CloudEvents attributes, trace
	// context).
	Headers map[string]string
	// Time, when set, is when the event was committed at its source (the
	// CloudEvents time): hooks get the delay from it to the receive. It is
	// not stored.
	Time time.Time
}

// Result reports what a receive did.
type Result struct {
	// Duplicate is true when the message was recorded for this consumer
	// before: nothing was stored and the handler did not run.
	Duplicate bool
}

// Config configures an Inbox.
type Config struct {
	// Schema holds inbox_messages. Defaults to outbox.SchemaDefault, which
	// on SQLite means the main database and on MySQL the connection's.
	Schema string
	// Consumer names the consumer: each one records every message once, so
	// two consumers (billing, notifications) each get every message.
	// Defaults to ConsumerDefault.
	Consumer string
	// Dialect is the SQL of the database the transactions run on. Defaults
	// to outbox.DialectPostgres; DialectMariaDB and DialectMySQL are the
	// same here.
	Dialect outbox.Dialect
	// Hooks observe receives: any mix of HookReceive implementations,
	// such as outboxprom's inbox metrics.
	Hooks []Hook
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Schema = cmp.Or(c.Schema, outbox.SchemaDefault)
	c.Consumer = cmp.Or(c.Consumer, ConsumerDefault)
	c.Dialect = cmp.Or(c.Dialect, outbox.DialectDefault)
	return c
}

// Inbox records received messages in inbox_messages, once per consumer and
// key (Source, ID), in the caller's transaction. It is safe for concurrent
// use.
type Inbox struct {
	cfg       Config
	pgInsert  pgdriver.InboxInsert    // DialectPostgres
	sqlInsert sqldriver.InboxInserter // SQLite, MySQL, MariaDB
	sqlDial   sqldriver.Dialect       // for transient errors
	receivers []HookReceive
}

// New returns an Inbox for cfg. It returns an *outbox.ConfigError naming
// the field when cfg is invalid.
func New(cfg Config) (*Inbox, error) {
	cfg = cfg.WithDefaults()
	if len(cfg.Consumer) > MaxConsumerLen {
		return nil, &outbox.ConfigError{Field: "Consumer", Err: fmt.Errorf("is %d bytes long: use at most %d", len(cfg.Consumer), MaxConsumerLen)}
	}
	in := &Inbox{cfg: cfg}
	switch cfg.Dialect {
	case outbox.DialectPostgres:
		in.pgInsert = pgdriver.NewInboxInsert(cfg.Schema)
	case outbox.DialectSQLite:
		in.sqlInsert, in.sqlDial = sqlitedriver.NewInboxInsert(cfg.Schema), sqlitedriver.Dialect{}
	case outbox.DialectMariaDB, outbox.DialectMySQL:
		in.sqlInsert, in.sqlDial = mysqldriver.NewInboxInsert(cfg.Schema), mysqldriver.Dialect{}
	default:
		if _, err := outbox.ParseDialect(string(cfg.Dialect)); err != nil {
			return nil, err
		}
	}
	for _, h := range cfg.Hooks {
		r, ok := h.(HookReceive)
		if !ok {
			return nil, &outbox.ConfigError{Field: "Hooks", Err: fmt.Errorf("%T implements no inbox hook interface (HookReceive)", h)}
		}
		in.receivers = append(in.receivers, r)
	}
	return in, nil
}

// Consumer is the consumer's name.
func (in *Inbox) Consumer() string { return in.cfg.Consumer }

// PgxTx is what Record and Store need: pgx.Tx, pgx.Conn and pgxpool.Pool
// all have it.
type PgxTx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// PgxBeginner begins the transaction Handle runs in: *pgxpool.Pool,
// *pgx.Conn, and pgx.Tx (a savepoint).
type PgxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// SQLTx is what RecordSQL and StoreSQL need: *sql.Tx, *sql.Conn and
// *sql.DB.
type SQLTx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Handle runs fn and records msg in one transaction begun on db, and
// commits it: the message's effect and its record commit together or not
// at all. A message recorded before for this consumer is not handled
// again: Handle returns Result{Duplicate: true} without calling fn. When
// fn returns an error, both roll back and Handle returns it wrapped, so the
// broker redelivers and the next delivery runs fn again.
//
// Two deliveries of one message at the same time (two consumer processes)
// run fn once: the second one's insert waits for the first transaction and
// finds the row once it committed (or inserts it, if it rolled back).
// Handle is for PostgreSQL; HandleSQL takes a *sql.DB.
func (in *Inbox) Handle(ctx context.Context, db PgxBeginner, msg Message, fn func(ctx context.Context, tx pgx.Tx) error) (Result, error) {
	rec, err := in.record(msg, true)
	if err != nil {
		return Result{}, err
	}
	if in.cfg.Dialect != outbox.DialectPostgres {
		return Result{}, in.dialectError("Handle", "HandleSQL")
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("inbox: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	res, err := in.pgInsertRecord(ctx, tx, rec)
	if err != nil || res.Duplicate {
		in.observe(ctx, msg, res, err)
		return res, err
	}
	if err := fn(ctx, tx); err != nil {
		return Result{}, handlerError(msg, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{}, fmt.Errorf("inbox: commit message %s: %w", msg.ID, err)
	}
	in.observe(ctx, msg, res, nil)
	return res, nil
}

// HandleSQL is Handle for database/sql: on PostgreSQL through the pgx
// stdlib driver, on SQLite, MariaDB and MySQL through theirs, as the
// Inbox's Dialect says. On MySQL and MariaDB a transaction chosen as a
// deadlock victim is run again, up to three times in all.
func (in *Inbox) HandleSQL(ctx context.Context, db *sql.DB, msg Message, fn func(ctx context.Context, tx *sql.Tx) error) (Result, error) {
	rec, err := in.record(msg, true)
	if err != nil {
		return Result{}, err
	}
	for attempt := 1; ; attempt++ {
		res, err := in.handleSQL(ctx, db, msg, rec, fn)
		if in.runAgain(ctx, err, attempt) {
			continue
		}
		if err == nil || res.Duplicate {
			in.observe(ctx, msg, res, nil)
		}
		return res, err
	}
}

// runAgain reports whether a database/sql transaction that failed with err
// on its attempt-th run is run again: a MySQL/MariaDB deadlock victim, up
// to three runs in all.
func (in *Inbox) runAgain(ctx context.Context, err error, attempt int) bool {
	return err != nil && attempt < 3 && in.sqlDial != nil && in.sqlDial.Transient(err) && ctx.Err() == nil
}

func (in *Inbox) handleSQL(ctx context.Context, db *sql.DB, msg Message, rec *driver.InboxRecord, fn func(ctx context.Context, tx *sql.Tx) error) (Result, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return Result{}, fmt.Errorf("inbox: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	res, err := in.sqlRecord(ctx, tx, rec)
	if err != nil || res.Duplicate {
		return res, err
	}
	if err := fn(ctx, tx); err != nil {
		return Result{}, handlerError(msg, err)
	}
	if err := tx.Commit(); err != nil {
		return Result{}, fmt.Errorf("inbox: commit message %s: %w", msg.ID, err)
	}
	return res, nil
}

// Record records msg as processed in the caller's transaction tx, in which
// the caller applies its effect; check Result.Duplicate before applying it.
// A duplicate does not abort tx. Hooks run at once, not at tx's commit:
// prefer Handle, which runs them after it. Record is for PostgreSQL;
// RecordSQL takes a database/sql transaction.
func (in *Inbox) Record(ctx context.Context, tx PgxTx, msg Message) (Result, error) {
	return in.pgPut(ctx, tx, msg, true)
}

// Store records msg unprocessed (processed_at NULL), for an application
// that takes the rows later with SQL (SELECT … WHERE processed_at IS NULL …
// FOR UPDATE SKIP LOCKED, then UPDATE … SET processed_at). Run on a pool it
// commits at once: when Store returns without an error the message is
// stored. This is what `outbox receive` does.
func (in *Inbox) Store(ctx context.Context, db PgxTx, msg Message) (Result, error) {
	return in.pgPut(ctx, db, msg, false)
}

// RecordSQL is Record for a database/sql transaction.
func (in *Inbox) RecordSQL(ctx context.Context, tx SQLTx, msg Message) (Result, error) {
	return in.sqlPut(ctx, tx, msg, true)
}

// StoreSQL is Store for database/sql.
func (in *Inbox) StoreSQL(ctx context.Context, db SQLTx, msg Message) (Result, error) {
	return in.sqlPut(ctx, db, msg, false)
}

// PgxBatcher sends a batch of statements in one round trip:
// *pgxpool.Pool, *pgx.Conn and pgx.Tx.
type PgxBatcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// SQLBeginner begins a database/sql transaction: *sql.DB and *sql.Conn.
type SQLBeginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// StoreBatch is Store for several messages at once, all or none: on a pool
// it sends every insert in one round trip, run by PostgreSQL as one
// implicit transaction, so when it returns without an error every message
// is stored (a message seen before, also earlier in msgs, is a duplicate
// and stored once). The results are in msgs' order. A message that fails
// CheckMessage stores none of them.
func (in *Inbox) StoreBatch(ctx context.Context, db PgxBatcher, msgs []Message) ([]Result, error) {
	if in.cfg.Dialect != outbox.DialectPostgres {
		return nil, in.dialectError("StoreBatch", "StoreBatchSQL")
	}
	recs, err := in.records(msgs)
	if err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	for _, rec := range recs {
		b.Queue(in.pgInsert.SQL, in.pgInsert.Args(rec)...)
	}
	br := db.SendBatch(ctx, b)
	results := make([]Result, len(recs))
	for i, rec := range recs {
		tag, err := br.Exec()
		if err != nil {
			_ = br.Close()
			return nil, recordError(rec, pgdriver.WrapError(err))
		}
		results[i] = Result{Duplicate: tag.RowsAffected() == 0}
	}
	if err := br.Close(); err != nil {
		return nil, recordError(recs[0], pgdriver.WrapError(err))
	}
	in.observeAll(ctx, msgs, results)
	return results, nil
}

// StoreBatchSQL is StoreBatch for database/sql: the messages are stored
// in one transaction begun on db, which commits once for all of them. On
// MySQL and MariaDB a transaction chosen as a deadlock victim is run
// again, up to three times in all, as HandleSQL does.
func (in *Inbox) StoreBatchSQL(ctx context.Context, db SQLBeginner, msgs []Message) ([]Result, error) {
	recs, err := in.records(msgs)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		results, err := in.storeBatchSQL(ctx, db, recs)
		if in.runAgain(ctx, err, attempt) {
			continue
		}
		if err != nil {
			return nil, err
		}
		in.observeAll(ctx, msgs, results)
		return results, nil
	}
}

func (in *Inbox) storeBatchSQL(ctx context.Context, db SQLBeginner, recs []*driver.InboxRecord) ([]Result, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, recordError(recs[0], in.wrapSQLError(err))
	}
	defer func() { _ = tx.Rollback() }()
	results := make([]Result, len(recs))
	for i, rec := range recs {
		if results[i], err = in.sqlRecord(ctx, tx, rec); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, recordError(recs[0], in.wrapSQLError(err))
	}
	return results, nil
}

// records validates and encodes msgs for the driver.
func (in *Inbox) records(msgs []Message) ([]*driver.InboxRecord, error) {
	if len(msgs) == 0 {
		return nil, errors.New("inbox: no messages to store")
	}
	recs := make([]*driver.InboxRecord, len(msgs))
	for i, msg := range msgs {
		rec, err := in.record(msg, false)
		if err != nil {
			return nil, err
		}
		recs[i] = rec
	}
	return recs, nil
}

func (in *Inbox) wrapSQLError(err error) error {
	if in.sqlInsert == nil {
		return pgdriver.WrapError(err)
	}
	return sqldriver.WrapError(in.sqlDial, err)
}

func (in *Inbox) observeAll(ctx context.Context, msgs []Message, results []Result) {
	for i, msg := range msgs {
		in.observe(ctx, msg, results[i], nil)
	}
}

func (in *Inbox) pgPut(ctx context.Context, tx PgxTx, msg Message, processed bool) (Result, error) {
	rec, err := in.record(msg, processed)
	if err != nil {
		return Result{}, err
	}
	if in.cfg.Dialect != outbox.DialectPostgres {
		return Result{}, in.dialectError("Record and Store", "RecordSQL and StoreSQL")
	}
	res, err := in.pgInsertRecord(ctx, tx, rec)
	in.observe(ctx, msg, res, err)
	return res, err
}

func (in *Inbox) sqlPut(ctx context.Context, tx SQLTx, msg Message, processed bool) (Result, error) {
	rec, err := in.record(msg, processed)
	if err != nil {
		return Result{}, err
	}
	res, err := in.sqlRecord(ctx, tx, rec)
	in.observe(ctx, msg, res, err)
	return res, err
}

func (in *Inbox) pgInsertRecord(ctx context.Context, tx PgxTx, rec *driver.InboxRecord) (Result, error) {
	tag, err := tx.Exec(ctx, in.pgInsert.SQL, in.pgInsert.Args(rec)...)
	if err != nil {
		return Result{}, recordError(rec, pgdriver.WrapError(err))
	}
	return Result{Duplicate: tag.RowsAffected() == 0}, nil
}

func (in *Inbox) sqlRecord(ctx context.Context, tx SQLTx, rec *driver.InboxRecord) (Result, error) {
	if in.sqlInsert == nil {
		// PostgreSQL through the pgx stdlib driver.
		r, err := tx.ExecContext(ctx, in.pgInsert.SQL, in.pgInsert.Args(rec)...)
		if err != nil {
			return Result{}, recordError(rec, pgdriver.WrapError(err))
		}
		n, err := r.RowsAffected()
		return Result{Duplicate: n == 0}, err
	}
	inserted, err := in.sqlInsert.InsertInbox(ctx, tx, rec)
	if err != nil {
		return Result{}, recordError(rec, sqldriver.WrapError(in.sqlDial, err))
	}
	return Result{Duplicate: !inserted}, nil
}

// record validates msg and encodes it for the driver.
func (in *Inbox) record(msg Message, processed bool) (*driver.InboxRecord, error) {
	if err := CheckMessage(msg); err != nil {
		return nil, err
	}
	payload := []byte(msg.Payload)
	if len(payload) == 0 {
		payload = []byte("null")
	}
	headers := []byte("{}")
	if len(msg.Headers) > 0 {
		var err error
		if headers, err = json.Marshal(msg.Headers); err != nil {
			return nil, &MessageError{ID: msg.ID, Field: "Headers", Err: err}
		}
	}
	return &driver.InboxRecord{Consumer: in.cfg.Consumer, Source: msg.Source, MessageID: msg.ID,
		EventType: msg.EventType, Payload: payload, Headers: headers, Processed: processed}, nil
}

func (in *Inbox) dialectError(method, instead string) error {
	return &outbox.ConfigError{Field: "Dialect", Err: fmt.Errorf("is %s: %s take pgx, which only PostgreSQL has; use %s with database/sql", in.cfg.Dialect, method, instead)}
}

func (in *Inbox) observe(ctx context.Context, msg Message, res Result, err error) {
	if err != nil || len(in.receivers) == 0 {
		return
	}
	info := ReceiveInfo{Consumer: in.cfg.Consumer, Duplicate: res.Duplicate}
	if !msg.Time.IsZero() {
		info.Delay = max(time.Since(msg.Time), 0)
	}
	for _, h := range in.receivers {
		h.OnReceive(ctx, info)
	}
}

// ErrNoTable is returned, wrapped, when inbox_messages does not exist:
// run outbox migrate --inbox (or outboxmigrate.MigrateInbox).
var ErrNoTable = outbox.ErrNoTable

func recordError(rec *driver.InboxRecord, err error) error {
	if errors.Is(err, driver.ErrNoTable) {
		return fmt.Errorf("inbox: record message %s: %w (run outbox migrate --inbox)", rec.MessageID, err)
	}
	return fmt.Errorf("inbox: record message %s: %w", rec.MessageID, err)
}

// HandlerError wraps the error a handler returned; the message's
// transaction was rolled back and nothing of it is stored.
type HandlerError struct {
	ID  string
	Err error
}

func (e *HandlerError) Error() string { return "inbox: handle message " + e.ID + ": " + e.Err.Error() }

// Unwrap returns the handler's error.
func (e *HandlerError) Unwrap() error { return e.Err }

func handlerError(msg Message, err error) error { return &HandlerError{ID: msg.ID, Err: err} }

// MessageError reports an invalid Message, refused before anything was
// sent to the database.
type MessageError struct {
	ID    string
	Field string
	Err   error
}

func (e *MessageError) Error() string {
	if e.ID == "" {
		return "inbox: message " + e.Field + " " + e.Err.Error()
	}
	return "inbox: message " + e.ID + ": " + e.Field + " " + e.Err.Error()
}

// Unwrap returns the reason.
func (e *MessageError) Unwrap() error { return e.Err }

// CheckMessage returns a *MessageError when msg cannot be recorded: no ID,
// a key part too long, a payload that is not JSON.
func CheckMessage(msg Message) error {
	switch {
	case msg.ID == "":
		return &MessageError{Field: "ID", Err: errors.New("is empty: every message needs the ID it keeps on redelivery")}
	case len(msg.ID) > MaxMessageIDLen:
		return &MessageError{Field: "ID", Err: fmt.Errorf("is %d bytes long: at most %d", len(msg.ID), MaxMessageIDLen)}
	case len(msg.Source) > MaxSourceLen:
		return &MessageError{ID: msg.ID, Field: "Source", Err: fmt.Errorf("is %d bytes long: at most %d", len(msg.Source), MaxSourceLen)}
	case len(msg.EventType) > 255:
		return &MessageError{ID: msg.ID, Field: "EventType", Err: fmt.Errorf("is %d bytes long: at most 255", len(msg.EventType))}
	case len(msg.Payload) > 0 && !json.Valid(msg.Payload):
		return &MessageError{ID: msg.ID, Field: "Payload", Err: errors.New("is not valid JSON")}
	}
	return nil
}
