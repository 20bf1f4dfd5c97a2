package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
)

// pgStore runs the scenarios in scratch schemas of one PostgreSQL database.
type pgStore struct {
	base *pgxpool.Config // copied for every pool a scenario opens
	ctl  *pgxpool.Pool   // setup, measurements, cleanup
	info storeInfo
	// flushStats is true when the server has pg_stat_force_next_flush
	// (PostgreSQL 15 and later).
	flushStats bool
	// checkpoint is true when the user may run CHECKPOINT (a superuser,
	// or a member of pg_checkpoint on PostgreSQL 15 and later).
	checkpoint bool
}

func openPostgres(ctx context.Context, poolConfig *pgxpool.Config) (*pgStore, error) {
	pc := poolConfig.Copy()
	// One connection: pg_stat_force_next_flush then flushes every change
	// the control connection made (pre-fill, truncate) before a reading.
	pc.MaxConns = 1
	pc.ConnConfig.RuntimeParams["application_name"] = "outbox-bench"
	ctl, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	st := &pgStore{base: poolConfig.Copy(), ctl: ctl}
	var autovacuum bool
	err = ctl.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('autovacuum')::bool,
    to_regproc('pg_stat_force_next_flush') IS NOT NULL,
    (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
        OR coalesce(pg_has_role(current_user, to_regrole('pg_checkpoint'), 'MEMBER'), false)`).
		Scan(&st.info.server, &autovacuum, &st.flushStats, &st.checkpoint)
	if err != nil {
		ctl.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	st.info.kind, st.info.dialect = "postgres", outbox.DialectPostgres
	st.info.autovacuum = &autovacuum
	st.info.notes = []string{
		"The relay's and the reference loop's connections both use outbox.ConfigureRelayPool (synchronous_commit=off); writers use the database's defaults.",
	}
	if !autovacuum {
		st.info.notes = append(st.info.notes, "autovacuum is off on this server: dead tuples stay and tables grow until something vacuums them.")
	}
	if !st.checkpoint {
		st.info.notes = append(st.info.notes, "This user may not CHECKPOINT (it takes a superuser or pg_checkpoint): a checkpoint can fall inside any phase, which makes the ratios noisier.")
	}
	return st, nil
}

func (st *pgStore) about() storeInfo { return st.info }

func (st *pgStore) close() { st.ctl.Close() }

// schemaComment marks a scratch schema, so an operator who finds one left
// behind (the bench process was killed) knows it is safe to drop.
const schemaComment = "outbox bench scratch schema: safe to drop"

func (st *pgStore) create(ctx context.Context, name string) (scratch, error) {
	s := &pgScratch{st: st, schemaName: name,
		table:   pgx.Identifier{name, "outbox_events"}.Sanitize(),
		archive: pgx.Identifier{name, "outbox_events_archive"}.Sanitize(),
		orders:  pgx.Identifier{name, "orders"}.Sanitize(),
	}
	schema := pgx.Identifier{name}.Sanitize()
	// CREATE without IF NOT EXISTS: the schema dropped at the end is
	// always one this call created.
	if _, err := st.ctl.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		return nil, fmt.Errorf("create scratch schema %s (the bench needs CREATE on the database): %w", name, err)
	}
	if _, err := st.ctl.Exec(ctx, `COMMENT ON SCHEMA `+schema+` IS '`+schemaComment+`'`); err != nil {
		return nil, errors.Join(fmt.Errorf("comment on scratch schema %s: %w", name, err), s.drop(ctx))
	}
	return s, nil
}

// pgScratch is a scratch schema.
type pgScratch struct {
	st                     *pgStore
	schemaName             string
	table, archive, orders string // quoted, schema-qualified
}

func (s *pgScratch) name() string              { return s.schemaName }
func (s *pgScratch) label() string             { return s.schemaName }
func (s *pgScratch) schema() string            { return s.schemaName }
func (s *pgScratch) database() outbox.Database { return outbox.Postgres(s.st.ctl) }

func (s *pgScratch) drop(ctx context.Context) error {
	if _, err := s.st.ctl.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{s.schemaName}.Sanitize()+` CASCADE`); err != nil {
		return fmt.Errorf("drop scratch schema %s: %w (drop it by hand)", s.schemaName, err)
	}
	return nil
}

// prefill inserts the events with generate_series, then vacuums and
// analyzes the table so the drain starts from a settled one.
func (s *pgScratch) prefill(ctx context.Context, n int, payload []byte, keys int) error {
	_, err := s.st.ctl.Exec(ctx, `INSERT INTO `+s.table+` (event_type, aggregate_type, aggregate_id, payload)
SELECT 'order.created', 'order', CASE WHEN $3::int > 0 THEN (g % $3::int)::text ELSE g::text END, $2::jsonb
FROM generate_series(1, $1::int) AS g`, n, string(payload), keys)
	if err != nil {
		return fmt.Errorf("pre-fill %d events: %w", n, err)
	}
	// Publish the insert's statistics before VACUUM counts the live rows,
	// or they would be added again on top of its count.
	if err := s.st.flushOwnStats(ctx); err != nil {
		return err
	}
	if _, err := s.st.ctl.Exec(ctx, `VACUUM ANALYZE `+s.table); err != nil {
		return fmt.Errorf("vacuum analyze: %w", err)
	}
	return s.settle(ctx)
}

// tableSize reads the outbox table's storage and tuple counts. A backend
// flushes its statistics when it exits, so after the phase's pools are
// closed the dead-tuple count includes all of the scenario's work.
func (s *pgScratch) tableSize(ctx context.Context) (TableSize, error) {
	if err := s.st.flushOwnStats(ctx); err != nil {
		return TableSize{}, err
	}
	var ts TableSize
	var index, live, dead, archive int64
	// Each reading is its own transaction, so it sees fresh statistics
	// (stats_fetch_consistency caches them per transaction).
	err := s.st.ctl.QueryRow(ctx, `SELECT pg_total_relation_size(t.oid), pg_indexes_size(t.oid),
    coalesce(st.n_live_tup, 0), coalesce(st.n_dead_tup, 0), pg_total_relation_size(a.oid)
FROM (SELECT $1::regclass::oid AS oid) t
CROSS JOIN (SELECT $2::regclass::oid AS oid) a
LEFT JOIN pg_stat_user_tables st ON st.relid = t.oid`, s.table, s.archive).
		Scan(&ts.TotalBytes, &index, &live, &dead, &archive)
	if err != nil {
		return TableSize{}, fmt.Errorf("read table size: %w", err)
	}
	ts.IndexBytes, ts.LiveTuples, ts.DeadTuples, ts.ArchiveTotalBytes = &index, &live, &dead, &archive
	return ts, nil
}

// flushOwnStats makes the control connection publish its pending table
// statistics now instead of within the next ten seconds.
func (st *pgStore) flushOwnStats(ctx context.Context) error {
	if !st.flushStats {
		return nil
	}
	if _, err := st.ctl.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		return fmt.Errorf("flush statistics: %w", err)
	}
	return nil
}

func (s *pgScratch) statuses(ctx context.Context) (statusCounts, error) {
	var c statusCounts
	err := s.st.ctl.QueryRow(ctx, statusCountsSQL(s.table, s.archive)).Scan(&c.undelivered, &c.processed, &c.remaining, &c.archived)
	if err != nil {
		return c, fmt.Errorf("count delivered events: %w", err)
	}
	return c, nil
}

func (s *pgScratch) backlog(ctx context.Context) (int64, error) {
	var n int64
	if err := s.st.ctl.QueryRow(ctx, backlogSQL(s.table)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count backlog: %w", err)
	}
	return n, nil
}

func (s *pgScratch) truncate(ctx context.Context) error {
	if _, err := s.st.ctl.Exec(ctx, `TRUNCATE `+s.orders+`, `+s.table+`, `+s.archive+` RESTART IDENTITY`); err != nil {
		return fmt.Errorf("empty the tables: %w", err)
	}
	return nil
}

// settle checkpoints, when the user may: the next phase then starts with
// no dirty buffers of an earlier one, and the full-page images that follow
// a checkpoint weigh on every phase alike.
func (s *pgScratch) settle(ctx context.Context) error {
	if !s.st.checkpoint {
		return nil
	}
	if _, err := s.st.ctl.Exec(ctx, `CHECKPOINT`); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

func (s *pgScratch) createOrders(ctx context.Context) error {
	_, err := s.st.ctl.Exec(ctx, `CREATE TABLE `+s.orders+` (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer    text NOT NULL,
    total_cents bigint NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
)`)
	if err != nil {
		return fmt.Errorf("create orders table: %w", err)
	}
	return nil
}

func (s *pgScratch) pools() pools { return &pgPools{s: s} }

// pgPools are pgx pools; close waits until their backends are gone.
type pgPools struct {
	s     *pgScratch
	names []string
	open  []*pgxpool.Pool
}

// relayPool opens a pool configured like a relay's (outbox.ConfigureRelayPool).
func (p *pgPools) relayPool(ctx context.Context, relayID string, maxConns int) (*pgxpool.Pool, error) {
	pc := p.s.st.base.Copy()
	outbox.ConfigureRelayPool(pc, relayID)
	pc.MaxConns = int32(min(maxConns, 1<<20))
	return p.connect(ctx, pc)
}

func (p *pgPools) relay(ctx context.Context, relayID string, conns int) (outbox.Database, error) {
	pool, err := p.relayPool(ctx, relayID, conns)
	if err != nil {
		return nil, err
	}
	return outbox.Postgres(pool), nil
}

func (p *pgPools) reference(ctx context.Context, relayID string, conns int, retention outbox.Retention) (referenceDB, error) {
	pool, err := p.relayPool(ctx, relayID, conns)
	if err != nil {
		return nil, err
	}
	return newPgReference(pool, p.s.table, p.s.archive, retention), nil
}

func (p *pgPools) writers(ctx context.Context, name string, conns int) (writerPool, error) {
	pc := p.s.st.base.Copy()
	pc.ConnConfig.RuntimeParams["application_name"] = name
	pc.MaxConns = int32(min(conns, 1<<20))
	pool, err := p.connect(ctx, pc)
	if err != nil {
		return nil, err
	}
	return pgWriterPool{pool: pool, orders: p.s.orders}, nil
}

func (p *pgPools) connect(ctx context.Context, pc *pgxpool.Config) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	p.names = append(p.names, pc.ConnConfig.RuntimeParams["application_name"])
	p.open = append(p.open, pool)
	return pool, nil
}

// close closes every pool and waits (at most 10 seconds) for their
// backends to exit.
func (p *pgPools) close(ctx context.Context) {
	for _, pool := range p.open {
		pool.Close()
	}
	p.open = nil
	if len(p.names) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = poll(ctx, 5*time.Millisecond, func() (bool, error) {
		var n int
		err := p.s.st.ctl.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = ANY($1)`, p.names).Scan(&n)
		return n == 0, err
	})
	p.names = nil
}

// pgReference is the reference loop's statements with pgx: one statement
// to claim, one to mark.
type pgReference struct {
	pool        *pgxpool.Pool
	claimSQL    string
	markSQL     string
	leaseMillis int64
}

func newPgReference(pool *pgxpool.Pool, table, archive string, retention outbox.Retention) *pgReference {
	// The claim locks due rows in a materialized CTE, so it never locks more
	// than the limit and keeps the pending partial index's range scan.
	// ORDER BY (available_at, id) is that index's order: ordering by id
	// alone would walk the primary key through every processed row.
	claim := `WITH c AS MATERIALIZED (
    SELECT id FROM ` + table + `
    WHERE status = 'pending' AND available_at <= now()
    ORDER BY available_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE ` + table + ` AS e
SET status = 'processing', locked_until = now() + $2::bigint * interval '1 millisecond'
FROM c
WHERE e.id = c.id
RETURNING e.id, e.event_type, coalesce(e.aggregate_type, ''), coalesce(e.aggregate_id, ''), e.payload, e.headers`
	var mark string
	switch retention {
	case outbox.RetainDelete:
		mark = `DELETE FROM ` + table + ` WHERE id = ANY($1::bigint[])`
	case outbox.RetainArchive:
		mark = `WITH moved AS (
    DELETE FROM ` + table + ` WHERE id = ANY($1::bigint[])
    RETURNING id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
              attempts, max_attempts, last_error, available_at, created_at
)
INSERT INTO ` + archive + ` (id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
    status, attempts, max_attempts, last_error, available_at, created_at, updated_at, processed_at)
SELECT id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
    'processed', attempts, max_attempts, last_error, available_at, created_at, now(), now()
FROM moved`
	default:
		mark = `UPDATE ` + table + ` SET status = 'processed', processed_at = now() WHERE id = ANY($1::bigint[])`
	}
	return &pgReference{pool: pool, claimSQL: claim, markSQL: mark, leaseMillis: referenceLease.Milliseconds()}
}

func (p *pgReference) claim(ctx context.Context, n int) ([]outbox.Event, error) {
	rows, err := p.pool.Query(ctx, p.claimSQL, n, p.leaseMillis)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	events := make([]outbox.Event, 0, n)
	var headers []byte
	for rows.Next() {
		var e outbox.Event
		if err := rows.Scan(&e.ID, &e.EventType, &e.AggregateType, &e.AggregateID, &e.Payload, &headers); err != nil {
			return nil, err
		}
		if err := decodeHeaders(&e, headers); err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	return events, rows.Err()
}

func (p *pgReference) mark(ctx context.Context, ids []int64) (int64, error) {
	tag, err := p.pool.Exec(ctx, p.markSQL, ids)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// pgWriterPool gives each writer a pgx connection of its own.
type pgWriterPool struct {
	pool   *pgxpool.Pool
	orders string
}

func (p pgWriterPool) acquire(ctx context.Context) (writerConn, error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return pgWriterConn{conn: conn, orders: p.orders}, nil
}

type pgWriterConn struct {
	conn   *pgxpool.Conn
	orders string
}

func (c pgWriterConn) release() { c.conn.Release() }

func (c pgWriterConn) checkout(ctx context.Context, w *outbox.Writer, customer string, cents int, payload json.RawMessage, keys int) (int64, error) {
	tx, err := c.conn.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	var orderID int64
	err = tx.QueryRow(ctx, `INSERT INTO `+c.orders+` (customer, total_cents) VALUES ($1, $2) RETURNING id`,
		customer, cents).Scan(&orderID)
	if err != nil {
		_ = tx.Rollback(ctx)
		return 0, fmt.Errorf("insert order: %w", err)
	}
	res, err := w.Write(ctx, tx, orderCreated(orderID, payload, keys))
	if err != nil {
		_ = tx.Rollback(ctx)
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return res.IDs[0], nil
}

// statusCountsSQL counts a drain's events by where they ended; the same
// statement on every database.
func statusCountsSQL(table, archive string) string {
	return `SELECT
    (SELECT count(*) FROM ` + table + ` WHERE status IN ('pending', 'processing', 'failed')),
    (SELECT count(*) FROM ` + table + ` WHERE status = 'processed'),
    (SELECT count(*) FROM ` + table + `),
    (SELECT count(*) FROM ` + archive + `)`
}

// backlogSQL counts pending and processing events. Literal statuses: each
// count reads its (partial, or status-led) index.
func backlogSQL(table string) string {
	return `SELECT (SELECT count(*) FROM ` + table + ` WHERE status = 'pending')
    + (SELECT count(*) FROM ` + table + ` WHERE status = 'processing')`
}
