package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
)

// LedgerSourceDefault is the source of the rows a Ledger records when
// LedgerConfig.Source is empty: it keeps them apart from the messages a
// consumer of the same name receives from a broker.
const LedgerSourceDefault = "handlersink"

// LedgerConfig configures a Ledger.
type LedgerConfig struct {
	// Schema holds inbox_messages (outbox migrate --inbox). Defaults to
	// outbox.SchemaDefault.
	Schema string
	// Source is the source column of the ledger's rows. Defaults to
	// LedgerSourceDefault. Event IDs are unique per outbox table: give
	// each outbox whose events one handler sink handles a Source of its
	// own (or use tenant-qualified events, whose UniqueID says it).
	Source string
}

// WithDefaults returns c with zero fields set to their defaults.
func (c LedgerConfig) WithDefaults() LedgerConfig {
	c.Schema = cmp.Or(c.Schema, outbox.SchemaDefault)
	c.Source = cmp.Or(c.Source, LedgerSourceDefault)
	return c
}

// PgxQuerier is what a Ledger needs of a connection: *pgxpool.Pool and
// *pgx.Conn have it.
type PgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Ledger is a handlersink.HandlerLedger kept in inbox_messages on
// PostgreSQL, so that an application already running the inbox needs no
// table of its own: each handler's success is one processed row with
// consumer = the handler's name, source = LedgerConfig.Source and
// message_id = the event's UniqueID. The inbox's purge (outbox inbox
// purge, Purge) trims the rows with the consumers' own, and they never
// count as consumer lag. Keep them as long as an event may be retried: a
// row purged earlier only means that handler runs again.
//
// Pass it as handlersink.Config.Ledger. It is safe for concurrent use.
type Ledger struct {
	db       PgxQuerier
	source   string
	insert   pgdriver.InboxInsert
	selectSQ string
}

// NewLedger returns a Ledger on db. The table must exist: run outbox
// migrate --inbox first.
func NewLedger(db PgxQuerier, cfg LedgerConfig) (*Ledger, error) {
	if db == nil {
		return nil, &outbox.ConfigError{Field: "db", Err: errors.New("is nil: pass a *pgxpool.Pool")}
	}
	cfg = cfg.WithDefaults()
	if len(cfg.Source) > MaxSourceLen {
		return nil, &outbox.ConfigError{Field: "Source", Err: fmt.Errorf("is %d bytes long: use at most %d", len(cfg.Source), MaxSourceLen)}
	}
	t := pgx.Identifier{cfg.Schema, "inbox_messages"}.Sanitize()
	// The primary key is (consumer, source, message_id) and the handler
	// names are not known here, so the recursive part walks the distinct
	// consumers on the key's index (one probe each: a loose index scan),
	// and each is then looked up with all of keys on the same index. One
	// statement per batch, never a scan of the table.
	sel := `WITH RECURSIVE c(consumer) AS (
    (SELECT consumer FROM ` + t + ` ORDER BY consumer LIMIT 1)
    UNION ALL
    SELECT (SELECT m.consumer FROM ` + t + ` m WHERE m.consumer > c.consumer ORDER BY m.consumer LIMIT 1)
    FROM c WHERE c.consumer IS NOT NULL
)
SELECT m.message_id, m.consumer FROM c JOIN ` + t + ` m
    ON m.consumer = c.consumer AND m.source = $1 AND m.message_id = ANY($2::text[])`
	return &Ledger{db: db, source: cfg.Source, insert: pgdriver.NewInboxInsert(cfg.Schema), selectSQ: sel}, nil
}

// Succeeded reads, in one statement, the handlers recorded as succeeded
// for keys (Event.UniqueID).
func (l *Ledger) Succeeded(ctx context.Context, keys []string) (map[string][]string, error) {
	out := map[string][]string{}
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := l.db.Query(ctx, l.selectSQ, l.source, keys)
	if err != nil {
		return nil, ledgerError("read", pgdriver.WrapError(err))
	}
	defer rows.Close()
	for rows.Next() {
		var key, handler string
		if err := rows.Scan(&key, &handler); err != nil {
			return nil, ledgerError("read", err)
		}
		out[key] = append(out[key], handler)
	}
	if err := rows.Err(); err != nil {
		return nil, ledgerError("read", pgdriver.WrapError(err))
	}
	return out, nil
}

// RecordSuccess records that handler succeeded for the event of key
// (Event.UniqueID) as a processed inbox row; a repeat is a no-op.
func (l *Ledger) RecordSuccess(ctx context.Context, key string, handler string) error {
	switch {
	case len(handler) > MaxConsumerLen:
		return &outbox.ConfigError{Field: "handler", Err: fmt.Errorf("name %q is %d bytes long: the inbox ledger keeps names of at most %d", handler[:32]+"…", len(handler), MaxConsumerLen)}
	case key == "":
		return &MessageError{Field: "ID", Err: errors.New("is empty: the ledger needs the event's UniqueID")}
	case len(key) > MaxMessageIDLen:
		return &MessageError{Field: "ID", Err: fmt.Errorf("is %d bytes long: at most %d", len(key), MaxMessageIDLen)}
	}
	rec := &driver.InboxRecord{Consumer: handler, Source: l.source, MessageID: key,
		Payload: []byte("null"), Headers: []byte("{}"), Processed: true}
	if _, err := l.db.Exec(ctx, l.insert.SQL, l.insert.Args(rec)...); err != nil {
		return ledgerError("record", recordError(rec, pgdriver.WrapError(err)))
	}
	return nil
}

func ledgerError(op string, err error) error {
	if errors.Is(err, driver.ErrNoTable) && op == "read" {
		return fmt.Errorf("inbox ledger: %s: %w (run outbox migrate --inbox)", op, err)
	}
	return fmt.Errorf("inbox ledger: %s: %w", op, err)
}
