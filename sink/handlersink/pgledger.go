package handlersink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox"
)

// LedgerTableDefault is the table PostgresLedger keeps its record in.
const LedgerTableDefault = "outbox_handler_runs"

// Pgx is what PostgresLedger needs of a connection: *pgxpool.Pool and
// *pgx.Conn have it.
type Pgx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// PostgresLedgerConfig configures a PostgresLedger.
type PostgresLedgerConfig struct {
	// Schema holds the table: the outbox's schema, since event IDs are
	// unique per outbox table. Defaults to outbox.SchemaDefault.
	Schema string
	// Table is the ledger's table. Defaults to LedgerTableDefault.
	Table string
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c PostgresLedgerConfig) WithDefaults() PostgresLedgerConfig {
	c.Schema = cmp.Or(c.Schema, outbox.SchemaDefault)
	c.Table = cmp.Or(c.Table, LedgerTableDefault)
	return c
}

// PostgresLedger is a HandlerLedger in a PostgreSQL table of its own: one
// row per (event ID, handler name) that succeeded. Create the table once
// with Migrate (or run MigrationSQL with your own migration tool), and
// trim it with Purge: a row is needed only while its event may still be
// retried.
type PostgresLedger struct {
	db    Pgx
	table string // quoted, schema-qualified
	index string // quoted index name, unqualified
}

var _ HandlerLedger = (*PostgresLedger)(nil)

// NewPostgresLedger returns a ledger on db.
func NewPostgresLedger(db Pgx, cfg PostgresLedgerConfig) (*PostgresLedger, error) {
	if db == nil {
		return nil, &outbox.ConfigError{Field: "db", Err: errors.New("is nil: pass a *pgxpool.Pool")}
	}
	cfg = cfg.WithDefaults()
	if strings.ContainsRune(cfg.Table, 0) || strings.ContainsRune(cfg.Schema, 0) || len(cfg.Table) > 50 {
		return nil, &outbox.ConfigError{Field: "Table", Err: fmt.Errorf("%q: use a plain table name of at most 50 bytes", cfg.Table)}
	}
	return &PostgresLedger{
		db:    db,
		table: pgx.Identifier{cfg.Schema, cfg.Table}.Sanitize(),
		index: pgx.Identifier{cfg.Table + "_succeeded_at_idx"}.Sanitize(),
	}, nil
}

// MigrationSQL is the statement that creates the ledger's table and index
// when they are missing.
func (l *PostgresLedger) MigrationSQL() string {
	// event_key is Event.UniqueID: the bare ID, or the ID qualified by its
	// tenant and database. The primary key serves Succeeded (event_key =
	// ANY) and makes a
	// repeated record a no-op; the index serves Purge.
	return `CREATE TABLE IF NOT EXISTS ` + l.table + ` (
    event_key    text        NOT NULL,
    handler      text        NOT NULL,
    succeeded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_key, handler)
);
CREATE INDEX IF NOT EXISTS ` + l.index + ` ON ` + l.table + ` (succeeded_at)`
}

// Migrate creates the ledger's table and index when they are missing. Run
// it at deployment, as outbox migrate is run, not on every start.
func (l *PostgresLedger) Migrate(ctx context.Context) error {
	if _, err := l.db.Exec(ctx, l.MigrationSQL()); err != nil {
		return fmt.Errorf("handlersink: create the ledger table %s: %w", l.table, err)
	}
	return nil
}

// Succeeded reads the recorded handlers of keys in one statement.
func (l *PostgresLedger) Succeeded(ctx context.Context, keys []string) (map[string][]string, error) {
	rows, err := l.db.Query(ctx, `SELECT event_key, handler FROM `+l.table+` WHERE event_key = ANY($1::text[])`, keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var id, name string
		if err := rows.Scan(&id, &name); err != nil {
			return nil, err
		}
		out[id] = append(out[id], name)
	}
	return out, rows.Err()
}

// RecordSuccess records one handler's success; a repeat is a no-op.
func (l *PostgresLedger) RecordSuccess(ctx context.Context, key string, handler string) error {
	_, err := l.db.Exec(ctx, `INSERT INTO `+l.table+` (event_key, handler) VALUES ($1, $2) ON CONFLICT DO NOTHING`, key, handler)
	return err
}

// purgeBatch bounds the rows one Purge statement deletes.
const purgeBatch = 1000

// Purge deletes the records older than olderThan (by the database clock),
// in batches, and returns how many it deleted. Keep them at least as long
// as an event may be retried: the relay's backoff up to its last attempt,
// and any dead-letter retry (a record purged earlier only means that
// handler runs again).
func (l *PostgresLedger) Purge(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan <= 0 {
		return 0, &outbox.ConfigError{Field: "olderThan", Err: errors.New("must be a positive duration")}
	}
	var total int64
	for {
		tag, err := l.db.Exec(ctx, `DELETE FROM `+l.table+` WHERE (event_key, handler) IN (
    SELECT event_key, handler FROM `+l.table+`
    WHERE succeeded_at < now() - $1::bigint * interval '1 millisecond'
    LIMIT `+fmt.Sprint(purgeBatch)+`)`, olderThan.Milliseconds())
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < purgeBatch {
			return total, nil
		}
	}
}
