package check

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cmd/outbox/internal/dburl"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// ScratchPrefix starts the name of every scratch schema, database or file
// outbox check creates; the rest is random.
const ScratchPrefix = "outbox_check_"

// scratchComment marks a PostgreSQL schema outbox check created.
const scratchComment = "created by outbox check; safe to drop"

// controlConns bounds the check's own connections: the writer, the
// progress polls and the final reads.
const controlConns = 4

// scratch is the check's own outbox — a schema, a database or a file that
// it created and migrated — and a direct connection to it (never through
// the fault proxy) for writing events and reading the outcome.
type scratch interface {
	// label names the scratch space in the report: a schema, a database
	// or a file path.
	label() string
	// schema is the relays' --schema; empty for the default.
	schema() string
	// target is the database server's host:port for the fault proxy, or
	// empty when connections cannot be proxied (SQLite, a Unix socket,
	// several hosts); why says why.
	target() (addr, why string)
	// relayURL is the database URL the relays get: the user's, pointed at
	// proxy when it is not empty.
	relayURL(proxy string) (string, error)
	manager() *outbox.Manager
	// write commits msgs in one transaction and returns their IDs.
	write(ctx context.Context, msgs []outbox.Message) ([]int64, error)
	// drop removes the scratch space and closes the connection.
	drop(ctx context.Context) error
	// close closes the connection and leaves the scratch space.
	close()
}

// scratchName returns a fresh outbox_check_<12 hex digits> name.
func scratchName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return ScratchPrefix + hex.EncodeToString(b)
}

// openScratch creates and migrates a scratch space on the database cfg
// names. On error nothing is left behind.
func openScratch(ctx context.Context, cfg *Config) (scratch, error) {
	if cfg.Postgres != nil {
		return openPgScratch(ctx, cfg)
	}
	c, err := dburl.Parse(cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if c.Kind == dburl.KindSQLite {
		return openSQLiteScratch(ctx, c)
	}
	return openMySQLScratch(ctx, cfg.DatabaseURL, c)
}

// pgScratch is a schema of its own on PostgreSQL.
type pgScratch struct {
	pool   *pgxpool.Pool
	raw    string
	name   string
	pc     *pgxpool.Config
	writer *outbox.Writer
}

func openPgScratch(ctx context.Context, cfg *Config) (scratch, error) {
	pc := cfg.Postgres.Copy()
	pc.MaxConns = controlConns
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	s := &pgScratch{pool: pool, raw: cfg.DatabaseURL, name: scratchName(), pc: pc}
	quoted := pgx.Identifier{s.name}.Sanitize()
	// CREATE SCHEMA without IF NOT EXISTS: a schema of that name that
	// already exists is not ours, and the check fails rather than use it.
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+quoted); err != nil {
		pool.Close()
		return nil, fmt.Errorf("create scratch schema %s: %w (the check needs CREATE on the database)", quoted, err)
	}
	if _, err := pool.Exec(ctx, `COMMENT ON SCHEMA `+quoted+` IS '`+scratchComment+`'`); err != nil {
		return nil, s.fail(ctx, err)
	}
	if err := s.migrate(ctx, cfg.PgBouncer); err != nil {
		return nil, s.fail(ctx, err)
	}
	s.writer = outbox.NewWriter(outbox.WriterConfig{Schema: s.name})
	return s, nil
}

// migrate creates the outbox tables in the scratch schema. Through
// PgBouncer in transaction mode, Migrate's session advisory lock could be
// taken and released on different server connections; the migrations'
// script in one transaction needs no lock, as nothing else knows the
// schema.
func (s *pgScratch) migrate(ctx context.Context, pgBouncer bool) error {
	db := outbox.Postgres(s.pool)
	cfg := outboxmigrate.Config{Schema: s.name}
	if !pgBouncer {
		_, err := outboxmigrate.Migrate(ctx, db, cfg)
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, outboxmigrate.SQL(db, cfg))
		return err
	})
}

// fail drops what was created and returns err.
func (s *pgScratch) fail(ctx context.Context, err error) error {
	if derr := s.drop(context.WithoutCancel(ctx)); derr != nil {
		return fmt.Errorf("%w (and dropping scratch schema %s failed: %w)", err, s.name, derr)
	}
	return err
}

func (s *pgScratch) label() string  { return s.name }
func (s *pgScratch) schema() string { return s.name }
func (s *pgScratch) close()         { s.pool.Close() }

func (s *pgScratch) manager() *outbox.Manager {
	return outbox.NewManager(outbox.Postgres(s.pool), outbox.ManagerConfig{Schema: s.name})
}

func (s *pgScratch) target() (string, string) {
	c := s.pc.ConnConfig
	for _, fb := range c.Fallbacks {
		// sslmode=prefer adds a fallback to the same host without TLS.
		if fb.Host != c.Host || fb.Port != c.Port {
			return "", "the database URL names several hosts"
		}
	}
	switch {
	case strings.HasPrefix(c.Host, "/"):
		return "", "the database URL names a Unix socket"
	}
	return net.JoinHostPort(c.Host, fmt.Sprint(c.Port)), ""
}

func (s *pgScratch) relayURL(proxy string) (string, error) {
	if proxy == "" {
		return s.raw, nil
	}
	if !strings.Contains(s.raw, "://") {
		// A keyword/value connection string: a later key wins.
		host, port, _ := net.SplitHostPort(proxy)
		return s.raw + " host=" + host + " port=" + port, nil
	}
	return withHost(s.raw, proxy)
}

func (s *pgScratch) write(ctx context.Context, msgs []outbox.Message) ([]int64, error) {
	var ids []int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res, err := s.writer.Write(ctx, tx, msgs...)
		ids = res.IDs
		return err
	})
	return ids, err
}

func (s *pgScratch) drop(ctx context.Context) error {
	defer s.pool.Close()
	_, err := s.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{s.name}.Sanitize()+` CASCADE`)
	return err
}

// withHost returns the URL raw with its host:port replaced.
func withHost(raw, hostPort string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", errors.New("the database URL cannot be pointed at the fault proxy: pass --cuts 0 to connect the relays directly")
	}
	u.Host = hostPort
	return u.String(), nil
}

// sqlScratch is a scratch database on MySQL/MariaDB or a scratch file on
// SQLite, reached through database/sql.
type sqlScratch struct {
	db     *sql.DB
	outbox outbox.Database
	raw    string // the relays' database URL, before the proxy
	name   string // the MySQL database, or the SQLite file's path
	mysql  bool
	addr   string // MySQL's host:port; empty on SQLite
	writer *outbox.Writer
}

// openMySQLScratch creates a database of its own on the server: the
// outbox's tables have fixed names, and a MySQL schema is a database.
func openMySQLScratch(ctx context.Context, raw string, c *dburl.Config) (scratch, error) {
	db, closer, kind, err := dburl.Open(ctx, raw, dburl.Options{MaxConns: controlConns})
	if err != nil {
		return nil, err
	}
	sdb := closer.(*sql.DB)
	s := &sqlScratch{db: sdb, outbox: db, raw: raw, name: scratchName(), mysql: true}
	if c.MySQL.Net == "tcp" {
		s.addr = c.MySQL.Addr
	}
	var n int
	if err := sdb.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?`, s.name).Scan(&n); err != nil || n > 0 {
		_ = sdb.Close()
		if err == nil {
			err = fmt.Errorf("database %s exists already", s.name)
		}
		return nil, err
	}
	// Migrate creates the database the schema names.
	if _, err := outboxmigrate.Migrate(ctx, db, outboxmigrate.Config{Schema: s.name}); err != nil {
		if derr := s.drop(context.WithoutCancel(ctx)); derr != nil {
			return nil, fmt.Errorf("%w (and dropping scratch database %s failed: %w)", err, s.name, derr)
		}
		return nil, fmt.Errorf("%w (the check needs CREATE and DROP on the server)", err)
	}
	s.writer = outbox.NewWriter(outbox.WriterConfig{Schema: s.name, Dialect: kind.Dialect()})
	return s, nil
}

// openSQLiteScratch creates a file of its own beside the database file:
// the outbox's tables have fixed names, so the check never opens the
// user's file at all.
func openSQLiteScratch(ctx context.Context, c *dburl.Config) (scratch, error) {
	dir, err := filepath.Abs(filepath.Dir(c.SQLitePath))
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, scratchName()+".db")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create scratch file: %w", err)
	}
	_ = f.Close()
	sdb, err := sql.Open("sqlite", c.SQLiteDSNFor(path))
	if err != nil {
		_ = removeSQLite(path)
		return nil, err
	}
	s := &sqlScratch{db: sdb, outbox: outbox.SQLite(sdb), raw: "sqlite://" + path, name: path}
	if _, err := outboxmigrate.Migrate(ctx, s.outbox, outboxmigrate.Config{}); err != nil {
		_ = s.drop(ctx)
		return nil, err
	}
	s.writer = outbox.NewWriter(outbox.WriterConfig{Dialect: outbox.DialectSQLite})
	return s, nil
}

func (s *sqlScratch) label() string { return s.name }
func (s *sqlScratch) close()        { _ = s.db.Close() }

func (s *sqlScratch) schema() string {
	if s.mysql {
		return s.name
	}
	return ""
}

func (s *sqlScratch) manager() *outbox.Manager {
	return outbox.NewManager(s.outbox, outbox.ManagerConfig{Schema: s.schema()})
}

func (s *sqlScratch) target() (string, string) {
	switch {
	case !s.mysql:
		return "", "SQLite has no network connection"
	case s.addr == "":
		return "", "the database URL does not name a TCP address"
	}
	return s.addr, ""
}

func (s *sqlScratch) relayURL(proxy string) (string, error) {
	if proxy == "" {
		return s.raw, nil
	}
	return withHost(s.raw, proxy)
}

func (s *sqlScratch) write(ctx context.Context, msgs []outbox.Message) (ids []int64, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	res, err := s.writer.WriteSQL(ctx, tx, msgs...)
	if err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return res.IDs, tx.Commit()
}

func (s *sqlScratch) drop(ctx context.Context) error {
	if !s.mysql {
		_ = s.db.Close()
		return removeSQLite(s.name)
	}
	defer func() { _ = s.db.Close() }()
	_, err := s.db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+strings.ReplaceAll(s.name, "`", "``")+"`")
	return err
}

// removeSQLite removes an SQLite file and its journal files.
func removeSQLite(path string) error {
	var errs []error
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
