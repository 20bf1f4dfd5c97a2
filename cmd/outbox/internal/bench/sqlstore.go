package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/outboxkit/outbox"
)

// sqlDialect is what the database/sql stores (SQLite, MySQL/MariaDB) do
// differently in the parts of the bench they share.
type sqlDialect struct {
	// now is the database clock in the outbox's stored form, and lease
	// that clock plus referenceLease.
	now, lease string
	// skipLocked ends the reference claim's select.
	skipLocked string
	// begin starts the reference claim's transaction.
	begin func(ctx context.Context, db *sql.DB) (sqlTx, error)
	// pendingIndex, byID and deleteFrom steer MySQL's optimizer as the
	// driver does: the claim reads the pending index in order and stops
	// at the limit; statements by an ID list look each ID up by primary
	// key instead of scanning a small table (which locks rows other loops
	// hold, and deadlocks them). deleteFrom(table) starts a DELETE.
	pendingIndex, byID string
	deleteFrom         func(table string) string
	// transient reports an error after which the statement's transaction
	// may simply run again (a deadlock victim), as any loop on that
	// database must; nil when there is none.
	transient func(error) bool
	// wrap is the outbox.Database on db.
	wrap func(db *sql.DB) outbox.Database
}

// sqlTx is a *sql.Tx, or SQLite's BEGIN IMMEDIATE transaction on a
// connection.
type sqlTx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	Commit() error
	Rollback() error
}

// sqlTables is a database/sql scratch space's control connection and its
// quoted table names.
type sqlTables struct {
	ctl                    *sql.DB
	table, archive, orders string
}

func (s sqlTables) statuses(ctx context.Context) (statusCounts, error) {
	var c statusCounts
	err := s.ctl.QueryRowContext(ctx, statusCountsSQL(s.table, s.archive)).Scan(&c.undelivered, &c.processed, &c.remaining, &c.archived)
	if err != nil {
		return c, fmt.Errorf("count delivered events: %w", err)
	}
	return c, nil
}

func (s sqlTables) backlog(ctx context.Context) (int64, error) {
	var n int64
	if err := s.ctl.QueryRowContext(ctx, backlogSQL(s.table)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count backlog: %w", err)
	}
	return n, nil
}

// sqlPools are *sql.DB pools on one scratch space, each opened by openDB,
// or by openReference (when set) for the reference loop.
type sqlPools struct {
	d                     sqlDialect
	tables                sqlTables
	openDB, openReference func(ctx context.Context) (*sql.DB, error)
	open                  []*sql.DB
}

func (p *sqlPools) connect(ctx context.Context, conns int) (*sql.DB, error) {
	return p.connectWith(ctx, p.openDB, conns)
}

func (p *sqlPools) connectWith(ctx context.Context, openDB func(ctx context.Context) (*sql.DB, error), conns int) (*sql.DB, error) {
	db, err := openDB(ctx)
	if err != nil {
		return nil, err
	}
	// As many idle connections as open ones: database/sql keeps only two
	// by default and would close and reopen the rest around every batch.
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	p.open = append(p.open, db)
	return db, nil
}

func (p *sqlPools) relay(ctx context.Context, _ string, conns int) (outbox.Database, error) {
	db, err := p.connect(ctx, conns)
	if err != nil {
		return nil, err
	}
	return p.d.wrap(db), nil
}

func (p *sqlPools) reference(ctx context.Context, _ string, conns int, retention outbox.Retention) (referenceDB, error) {
	openDB := p.openReference
	if openDB == nil {
		openDB = p.openDB
	}
	db, err := p.connectWith(ctx, openDB, conns)
	if err != nil {
		return nil, err
	}
	return newSQLReference(db, p.d, p.tables, retention), nil
}

func (p *sqlPools) writers(ctx context.Context, _ string, conns int) (writerPool, error) {
	db, err := p.connect(ctx, conns)
	if err != nil {
		return nil, err
	}
	return sqlWriterPool{db: db, insertOrder: `INSERT INTO ` + p.tables.orders + ` (customer, total_cents) VALUES (?, ?)`}, nil
}

func (p *sqlPools) close(context.Context) {
	for _, db := range p.open {
		_ = db.Close()
	}
	p.open = nil
}

// sqlReference is the reference loop's statements with database/sql: the
// claim's select and update in one short transaction (the select locks its
// rows with SKIP LOCKED on MySQL; on SQLite the transaction holds the only
// write lock), then one statement to mark (two in one transaction to
// archive, since neither database moves rows between tables in one
// statement).
type sqlReference struct {
	db       *sql.DB
	d        sqlDialect
	claimSQL string
	// lockSQL, markSQL and archiveSQL end in "id IN (": the caller adds
	// the placeholders.
	lockSQL, markSQL, archiveSQL string
}

func newSQLReference(db *sql.DB, d sqlDialect, t sqlTables, retention outbox.Retention) *sqlReference {
	r := &sqlReference{db: db, d: d,
		// Served by outbox_events_pending_idx: (available_at, id) among
		// pending rows on SQLite, (status, available_at, id) on MySQL.
		claimSQL: `SELECT id, event_type, coalesce(aggregate_type, ''), coalesce(aggregate_id, ''), payload, headers
FROM ` + t.table + d.pendingIndex + `
WHERE status = 'pending' AND available_at <= ` + d.now + `
ORDER BY available_at, id
LIMIT ?` + d.skipLocked,
		lockSQL: `UPDATE ` + t.table + d.byID + ` SET status = 'processing', locked_until = ` + d.lease + ` WHERE status = 'pending' AND id IN (`,
	}
	// The status tests only filter: they keep MySQL to the primary key
	// (FORCE INDEX alone allows a full scan of it).
	switch retention {
	case outbox.RetainDelete:
		r.markSQL = d.deleteFrom(t.table) + ` WHERE status = 'processing' AND id IN (`
	case outbox.RetainArchive:
		r.archiveSQL = `INSERT INTO ` + t.archive + ` (id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
    status, attempts, max_attempts, last_error, available_at, created_at, updated_at, processed_at)
SELECT id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
    'processed', attempts, max_attempts, last_error, available_at, created_at, ` + d.now + `, ` + d.now + `
FROM ` + t.table + d.byID + ` WHERE status = 'processing' AND id IN (`
		r.markSQL = d.deleteFrom(t.table) + ` WHERE status = 'processing' AND id IN (`
	default:
		r.markSQL = `UPDATE ` + t.table + d.byID + ` SET status = 'processed', processed_at = ` + d.now + ` WHERE status = 'processing' AND id IN (`
	}
	return r
}

// retry runs op again, up to 3 times in all, while it fails with a
// transient error.
func (r *sqlReference) retry(op func() error) error {
	err := op()
	for try := 1; try < 3 && err != nil && r.d.transient != nil && r.d.transient(err); try++ {
		err = op()
	}
	return err
}

func (r *sqlReference) claim(ctx context.Context, n int) (events []outbox.Event, err error) {
	err = r.retry(func() (err error) {
		events, err = r.claimOnce(ctx, n)
		return err
	})
	return events, err
}

func (r *sqlReference) claimOnce(ctx context.Context, n int) (events []outbox.Event, err error) {
	tx, err := r.d.begin(ctx, r.db)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if events, err = r.selectDue(ctx, tx, n); err != nil {
		return nil, err
	}
	if len(events) > 0 {
		ids := make([]int64, len(events))
		for i := range events {
			ids[i] = events[i].ID
		}
		q, args := inList(r.lockSQL, ids)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return nil, err
		}
	}
	return events, tx.Commit()
}

// selectDue reads (and on MySQL locks) up to n due events.
func (r *sqlReference) selectDue(ctx context.Context, tx sqlTx, n int) ([]outbox.Event, error) {
	rows, err := tx.QueryContext(ctx, r.claimSQL, n)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	events := make([]outbox.Event, 0, n)
	var payload, headers []byte
	for rows.Next() {
		var e outbox.Event
		if err := rows.Scan(&e.ID, &e.EventType, &e.AggregateType, &e.AggregateID, &payload, &headers); err != nil {
			return nil, err
		}
		e.Payload = json.RawMessage(payload)
		if err := decodeHeaders(&e, headers); err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	return events, rows.Err()
}

func (r *sqlReference) mark(ctx context.Context, ids []int64) (n int64, err error) {
	err = r.retry(func() (err error) {
		n, err = r.markOnce(ctx, ids)
		return err
	})
	return n, err
}

func (r *sqlReference) markOnce(ctx context.Context, ids []int64) (int64, error) {
	q, args := inList(r.markSQL, ids)
	if r.archiveSQL == "" {
		res, err := r.db.ExecContext(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
	tx, err := r.d.begin(ctx, r.db)
	if err != nil {
		return 0, err
	}
	ins, _ := inList(r.archiveSQL, ids)
	if _, err := tx.ExecContext(ctx, ins, args...); err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	return n, tx.Commit()
}

// inList closes prefix's "id IN (" with a placeholder per ID.
func inList(prefix string, ids []int64) (string, []any) {
	var b strings.Builder
	b.Grow(len(prefix) + 3*len(ids) + 1)
	b.WriteString(prefix)
	args := make([]any, len(ids))
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('?')
		args[i] = id
	}
	b.WriteByte(')')
	return b.String(), args
}

// sqlWriterPool gives each writer a database/sql connection of its own.
type sqlWriterPool struct {
	db          *sql.DB
	insertOrder string
}

func (p sqlWriterPool) acquire(ctx context.Context) (writerConn, error) {
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return sqlWriterConn{conn: conn, insertOrder: p.insertOrder}, nil
}

type sqlWriterConn struct {
	conn        *sql.Conn
	insertOrder string
}

func (c sqlWriterConn) release() { _ = c.conn.Close() }

// checkout inserts the order and reads its ID with LastInsertId, which
// SQLite, MySQL and MariaDB all have (MySQL has no INSERT … RETURNING).
func (c sqlWriterConn) checkout(ctx context.Context, w *outbox.Writer, customer string, cents int, payload json.RawMessage, keys int) (int64, error) {
	tx, err := c.conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	res, err := tx.ExecContext(ctx, c.insertOrder, customer, cents)
	var orderID int64
	if err == nil {
		orderID, err = res.LastInsertId()
	}
	if err != nil {
		_ = tx.Rollback()
		return 0, fmt.Errorf("insert order: %w", err)
	}
	wr, err := w.WriteSQL(ctx, tx, orderCreated(orderID, payload, keys))
	if err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return wr.IDs[0], nil
}
