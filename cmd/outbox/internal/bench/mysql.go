package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cmd/outbox/internal/dburl"
	"github.com/outboxkit/outbox/internal/driver/mysqldriver"
)

// mysqlStore runs each scenario in a scratch database of its own on a
// MySQL 8 or MariaDB server. The URL's own database is never used.
type mysqlStore struct {
	base  *mysql.Config // the URL's settings, for every pool
	admin *sql.DB       // on no database: CREATE and DROP DATABASE
	info  storeInfo
	// mariadb is true on MariaDB, and sequence when its SEQUENCE engine
	// (the seq_1_to_N tables) is there for the pre-fill.
	mariadb, sequence bool
}

var mysqlDialect = sqlDialect{
	now:        `UTC_TIMESTAMP(6)`,
	lease:      `(UTC_TIMESTAMP(6) + INTERVAL ` + strconv.Itoa(int(referenceLease.Seconds())) + ` SECOND)`,
	skipLocked: ` FOR UPDATE SKIP LOCKED`,
	// The reference pool's sessions are READ COMMITTED already (see
	// referenceParams).
	begin:        func(ctx context.Context, db *sql.DB) (sqlTx, error) { return db.BeginTx(ctx, nil) },
	wrap:         outbox.MySQL,
	pendingIndex: mysqldriver.Dialect{}.Index("outbox_events_pending_idx"),
	byID:         mysqldriver.Dialect{}.ByID(),
	deleteFrom:   mysqldriver.Dialect{}.DeleteByID,
	transient:    mysqldriver.Dialect{}.Transient,
}

// referenceParams make the reference loop's sessions READ COMMITTED: the
// claim's locking read takes record locks only, no gap locks that would make
// the writers' inserts wait, and a mark's UPDATE passes over rows that
// another loop has locked (a semi-consistent read) instead of waiting for
// them, which it would do whenever the optimizer scans a small table rather
// than look up each ID, and which deadlocks two loops. Setting it per
// session saves the round trip a per-transaction isolation level costs.
func (st *mysqlStore) referenceParams() map[string]string {
	if st.mariadb {
		return map[string]string{"tx_isolation": "'READ-COMMITTED'"}
	}
	return map[string]string{"transaction_isolation": "'READ-COMMITTED'"}
}

func openMySQL(ctx context.Context, url *dburl.Config) (*mysqlStore, error) {
	st := &mysqlStore{base: url.MySQL.Clone()}
	var err error
	if st.admin, err = st.open("", nil); err != nil {
		return nil, err
	}
	var version, flush string
	err = st.admin.QueryRowContext(ctx, `SELECT VERSION(), @@innodb_flush_log_at_trx_commit`).Scan(&version, &flush)
	if err != nil {
		st.close()
		return nil, fmt.Errorf("connect to %s: %w", url.Redacted, err)
	}
	st.mariadb = strings.Contains(strings.ToLower(version), "mariadb")
	st.info = storeInfo{kind: "mysql", server: version, dialect: outbox.DialectMySQL}
	if st.mariadb {
		st.info.kind, st.info.dialect = "mariadb", outbox.DialectMariaDB
		var n int
		err := st.admin.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.ENGINES
WHERE ENGINE = 'SEQUENCE' AND SUPPORT IN ('YES', 'DEFAULT')`).Scan(&n)
		if err != nil {
			st.close()
			return nil, fmt.Errorf("connect to %s: %w", url.Redacted, err)
		}
		st.sequence = n > 0
	} else {
		// MySQL 8 caches information_schema's table sizes for a day by
		// default; the bench reads them after ANALYZE TABLE, uncached.
		st.base.Params = mergeParams(st.base.Params, map[string]string{"information_schema_stats_expiry": "0"})
	}
	st.info.notes = []string{
		"Each scenario runs in a scratch database (CREATE DATABASE, dropped afterwards); the bench needs CREATE and DROP on the server.",
		"MySQL and MariaDB have no per-session synchronous_commit: the writers', the relay's and the reference loop's commits are all as durable as innodb_flush_log_at_trx_commit=" + flush + " makes them.",
		"total_bytes, index_bytes and archive_total_bytes are InnoDB's data_length + index_length from information_schema.TABLES after ANALYZE TABLE: page-granular estimates. live_tuples and dead_tuples are PostgreSQL only.",
	}
	return st, nil
}

func mergeParams(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// open opens a pool on database (none when empty) with the URL's settings
// and the session variables in params.
func (st *mysqlStore) open(database string, params map[string]string) (*sql.DB, error) {
	cfg := st.base.Clone()
	cfg.DBName = database
	cfg.Params = mergeParams(cfg.Params, params)
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(2)
	return db, nil
}

func (st *mysqlStore) about() storeInfo { return st.info }

func (st *mysqlStore) close() { _ = st.admin.Close() }

// scratchComment marks a scratch database (MariaDB keeps database
// comments), so an operator who finds one left behind knows it is safe to
// drop.
const scratchComment = "outbox bench scratch database: safe to drop"

func (st *mysqlStore) create(ctx context.Context, name string) (scratch, error) {
	stmt := "CREATE DATABASE " + mysqlQuote(name) + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
	if st.mariadb {
		stmt += " COMMENT '" + scratchComment + "'"
	}
	// CREATE without IF NOT EXISTS: the database dropped at the end is
	// always one this call created.
	if _, err := st.admin.ExecContext(ctx, stmt); err != nil {
		return nil, fmt.Errorf("create scratch database %s (the bench needs CREATE and DROP on the server): %w", name, err)
	}
	s := &mysqlScratch{st: st, dbName: name}
	ctl, err := st.open(name, nil)
	if err != nil {
		return nil, errors.Join(err, s.drop(ctx))
	}
	s.sqlTables = sqlTables{ctl: ctl, table: "`outbox_events`", archive: "`outbox_events_archive`", orders: "`orders`"}
	return s, nil
}

func mysqlQuote(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// mysqlScratch is a scratch database; every pool on it has it as its
// current database, so the tables need no qualifier.
type mysqlScratch struct {
	sqlTables
	st     *mysqlStore
	dbName string
}

func (s *mysqlScratch) name() string              { return s.dbName }
func (s *mysqlScratch) label() string             { return s.dbName }
func (s *mysqlScratch) schema() string            { return "" } // the connection's database
func (s *mysqlScratch) database() outbox.Database { return outbox.MySQL(s.ctl) }

func (s *mysqlScratch) drop(ctx context.Context) error {
	var errs []error
	if s.ctl != nil {
		errs = append(errs, s.ctl.Close())
	}
	if _, err := s.st.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+mysqlQuote(s.dbName)); err != nil {
		errs = append(errs, fmt.Errorf("drop scratch database %s: %w (drop it by hand)", s.dbName, err))
	}
	return errors.Join(errs...)
}

// prefill inserts the events in one statement — from MariaDB's sequence
// engine where it is there, else from a recursive CTE — then analyzes the
// table so the drain starts with current statistics.
func (s *mysqlScratch) prefill(ctx context.Context, n int, payload []byte, keys int) error {
	conn, err := s.ctl.Conn(ctx)
	if err != nil {
		return fmt.Errorf("pre-fill %d events: %w", n, err)
	}
	defer func() { _ = conn.Close() }()
	const insert = `INSERT INTO ` + "`outbox_events`" + ` (event_type, aggregate_type, aggregate_id, payload)
`
	var q string
	switch {
	case s.st.sequence:
		q = insert + `SELECT 'order.created', 'order', CAST(CASE WHEN ? > 0 THEN seq % ? ELSE seq END AS CHAR), ? FROM seq_1_to_` + strconv.Itoa(n)
	default:
		if !s.st.mariadb {
			// MySQL stops a recursive CTE after 1000 rows unless told.
			if _, err := conn.ExecContext(ctx, `SET SESSION cte_max_recursion_depth = `+strconv.Itoa(n+1)); err != nil {
				return fmt.Errorf("pre-fill %d events: %w", n, err)
			}
		}
		q = insert + `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ` + strconv.Itoa(n) + `)
SELECT 'order.created', 'order', CAST(CASE WHEN ? > 0 THEN n % ? ELSE n END AS CHAR), ? FROM g`
	}
	var id int64
	if err := conn.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&id); err != nil {
		return fmt.Errorf("pre-fill %d events: %w", n, err)
	}
	if _, err := conn.ExecContext(ctx, q, keys, keys, string(payload)); err != nil {
		if ctx.Err() != nil {
			s.st.kill(ctx, id)
		}
		return fmt.Errorf("pre-fill %d events: %w", n, err)
	}
	return s.analyze(ctx, s.table)
}

// kill stops the statement running on connection id. The driver only
// closes its socket when ctx ends, and the server would go on inserting
// (and hold the table, so DROP DATABASE waits) until the statement ends.
func (st *mysqlStore) kill(ctx context.Context, id int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, _ = st.admin.ExecContext(ctx, `KILL QUERY `+strconv.FormatInt(id, 10))
}

// analyze runs ANALYZE TABLE, which answers with a result set.
func (s *mysqlScratch) analyze(ctx context.Context, tables ...string) error {
	rows, err := s.ctl.QueryContext(ctx, `ANALYZE TABLE `+strings.Join(tables, ", "))
	if err != nil {
		return fmt.Errorf("analyze table: %w", err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		// One row per table, saying "OK" or why not.
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("analyze table: %w", err)
	}
	return nil
}

// tableSize reads InnoDB's sizes from information_schema, after ANALYZE
// TABLE brings them up to date.
func (s *mysqlScratch) tableSize(ctx context.Context) (TableSize, error) {
	if err := s.analyze(ctx, s.table, s.archive); err != nil {
		return TableSize{}, err
	}
	var (
		ts                       TableSize
		data, index, archiveData int64
		archiveIndex             int64
	)
	err := s.ctl.QueryRowContext(ctx, `SELECT
    sum(CASE WHEN TABLE_NAME = 'outbox_events' THEN DATA_LENGTH END),
    sum(CASE WHEN TABLE_NAME = 'outbox_events' THEN INDEX_LENGTH END),
    sum(CASE WHEN TABLE_NAME = 'outbox_events_archive' THEN DATA_LENGTH END),
    sum(CASE WHEN TABLE_NAME = 'outbox_events_archive' THEN INDEX_LENGTH END)
FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('outbox_events', 'outbox_events_archive')`).
		Scan(&data, &index, &archiveData, &archiveIndex)
	if err != nil {
		return TableSize{}, fmt.Errorf("read table size: %w", err)
	}
	archive := archiveData + archiveIndex
	ts.TotalBytes, ts.IndexBytes, ts.ArchiveTotalBytes = data+index, &index, &archive
	return ts, nil
}

// truncate empties the tables; TRUNCATE restarts AUTO_INCREMENT.
func (s *mysqlScratch) truncate(ctx context.Context) error {
	for _, t := range []string{s.orders, s.table, s.archive} {
		if _, err := s.ctl.ExecContext(ctx, `TRUNCATE TABLE `+t); err != nil {
			return fmt.Errorf("empty the tables: %w", err)
		}
	}
	return nil
}

// settle does nothing: InnoDB checkpoints on its own, and no statement
// asks it to.
func (*mysqlScratch) settle(context.Context) error { return nil }

func (s *mysqlScratch) createOrders(ctx context.Context) error {
	_, err := s.ctl.ExecContext(ctx, `CREATE TABLE `+s.orders+` (
    id          BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    customer    VARCHAR(255) NOT NULL,
    total_cents BIGINT NOT NULL,
    created_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB`)
	if err != nil {
		return fmt.Errorf("create orders table: %w", err)
	}
	return nil
}

func (s *mysqlScratch) pools() pools {
	return &sqlPools{d: mysqlDialect, tables: s.sqlTables,
		openDB: func(context.Context) (*sql.DB, error) { return s.st.open(s.dbName, nil) },
		openReference: func(context.Context) (*sql.DB, error) {
			return s.st.open(s.dbName, s.st.referenceParams())
		},
	}
}
