// Package dburl opens the outbox's database from a URL: postgres:// and
// postgresql:// (pgx), sqlite: and file: (modernc.org/sqlite, pure Go) and
// mysql:// (go-sql-driver/mysql, for MySQL 8 and MariaDB). The outbox CLI
// opens every database through it. Unlike the root package, it imports the
// database/sql drivers, so that a program that links it speaks all three.
//
// Errors never show a password: URLs in messages are redacted.
package dburl

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/sqlitedriver"
)

// Kind is the kind of database a URL names.
type Kind string

// The kinds.
const (
	KindPostgres Kind = "postgres"
	KindSQLite   Kind = "sqlite"
	// KindMySQL is a MySQL server; Open reports KindMariaDB for MariaDB,
	// which it tells apart by the server's version.
	KindMySQL   Kind = "mysql"
	KindMariaDB Kind = "mariadb"
)

// Dialect is the writer dialect for the kind.
func (k Kind) Dialect() outbox.Dialect {
	switch k {
	case KindSQLite:
		return outbox.DialectSQLite
	case KindMariaDB:
		return outbox.DialectMariaDB
	case KindMySQL:
		return outbox.DialectMySQL
	}
	return outbox.DialectPostgres
}

// ConnectTimeoutDefault bounds the first connection unless
// Options.ConnectTimeout is set.
const ConnectTimeoutDefault = 15 * time.Second

// Options tune the pool Open makes.
type Options struct {
	// RelayID, when set, prepares a PostgreSQL pool for a relay alone (see
	// outbox.ConfigureRelayPool): its connections show as
	// application_name outbox-relay:<RelayID>.
	RelayID string
	// MaxConns bounds the pool's connections; 0 keeps the driver's default.
	// A database/sql pool (SQLite, MySQL) also keeps that many idle, so a
	// relay's workers do not reconnect between batches (database/sql
	// keeps two by default).
	MaxConns int
	// ConnectTimeout bounds the first connection and its check. Defaults to
	// ConnectTimeoutDefault.
	ConnectTimeout time.Duration
	// Lazy, for MySQL/MariaDB, skips the check that the server answers:
	// the pool connects on first use, so a server that is down fails its
	// statements instead of Open, and the Kind is KindMySQL for both.
	Lazy bool
}

// Config is a parsed database URL.
type Config struct {
	Kind Kind
	// Postgres is set for KindPostgres.
	Postgres *pgxpool.Config
	// SQLiteDSN is set for KindSQLite: the modernc.org/sqlite DSN, with the
	// outbox's pragmas added.
	SQLiteDSN string
	// SQLitePath is the file a KindSQLite URL names, as written: absolute,
	// or relative to the working directory.
	SQLitePath string
	// sqliteQuery is SQLiteDSN's query: the pragmas and driver parameters.
	sqliteQuery url.Values
	// MySQL is set for KindMySQL.
	MySQL *mysql.Config
	// Redacted is the URL with its password masked, for messages.
	Redacted string
}

// ErrUnknownScheme is returned for a URL whose scheme names no supported
// database.
var ErrUnknownScheme = errors.New("unknown database URL scheme: use postgres://, sqlite:, file: or mysql://")

// Parse reads rawURL without connecting.
func Parse(rawURL string) (*Config, error) {
	red := Redact(rawURL)
	scheme, _, ok := strings.Cut(rawURL, ":")
	if !ok {
		return nil, fmt.Errorf("database URL %q: %w", red, ErrUnknownScheme)
	}
	c := &Config{Redacted: red}
	var err error
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		c.Kind = KindPostgres
		c.Postgres, err = pgxpool.ParseConfig(rawURL)
		if err != nil {
			return nil, fmt.Errorf("invalid PostgreSQL URL %q: %s", red, pgReason(err))
		}
	case "sqlite", "file":
		c.Kind = KindSQLite
		c.SQLitePath, c.sqliteQuery, err = sqliteFile(rawURL)
		if err == nil {
			c.SQLiteDSN = sqliteDSN(c.SQLitePath, c.sqliteQuery)
		}
	case "mysql", "mariadb":
		c.Kind = KindMySQL
		c.MySQL, err = mysqlConfig(rawURL)
	default:
		return nil, fmt.Errorf("database URL %q: %w", red, ErrUnknownScheme)
	}
	if err != nil {
		return nil, fmt.Errorf("invalid database URL %q: %w", red, err)
	}
	return c, nil
}

// pgReason is pgx's reason without the URL it repeats (pgx masks the
// password there only on a best-effort basis).
func pgReason(err error) string {
	msg := err.Error()
	if _, after, found := strings.Cut(msg, "`: "); found {
		return after
	}
	return "cannot parse it"
}

// sqliteFile reads the path and the query of sqlite:///abs.db,
// sqlite:rel.db and file:path?…, and adds the outbox's pragmas (WAL, busy
// timeout) to the query unless the URL sets its own.
func sqliteFile(raw string) (string, url.Values, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", nil, errors.New("cannot parse it")
	}
	var path string
	switch {
	case u.Opaque != "":
		path, err = url.PathUnescape(u.Opaque)
		if err != nil {
			return "", nil, err
		}
	case u.Host != "":
		return "", nil, fmt.Errorf("%s://%s… names a host: use %s:///absolute/path.db or %s:relative/path.db", u.Scheme, u.Host, u.Scheme, u.Scheme)
	default:
		path = u.Path
	}
	if path == "" || strings.HasSuffix(path, "/") {
		return "", nil, errors.New("names no file: use sqlite:///absolute/path.db or sqlite:relative/path.db")
	}
	q := u.Query()
	defaults, _ := url.ParseQuery(sqlitedriver.DSNParams)
	have := strings.Join(q["_pragma"], ",")
	for _, p := range defaults["_pragma"] {
		name, _, _ := strings.Cut(p, "(")
		if !strings.Contains(strings.ToLower(have), strings.ToLower(name)) {
			q.Add("_pragma", p)
		}
	}
	return path, q, nil
}

// sqliteDSN is the modernc.org/sqlite DSN for the file at path.
func sqliteDSN(path string, q url.Values) string {
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// SQLiteDSNFor returns the DSN of another SQLite file, at path, with the
// URL's pragmas and driver parameters, except mode and immutable: the file
// is opened read-write and created if missing. outbox bench opens its
// scratch files with it.
func (c *Config) SQLiteDSNFor(path string) string {
	q := url.Values{}
	for k, v := range c.sqliteQuery {
		if k != "mode" && k != "immutable" {
			q[k] = v
		}
	}
	if len(q) == 0 {
		defaults, _ := url.ParseQuery(sqlitedriver.DSNParams)
		q = defaults
	}
	return sqliteDSN(path, q)
}

// mysqlConfig turns mysql://user:pass@host:port/db?params into a
// go-sql-driver config: parseTime on, UTC, and the URL's query as DSN
// parameters. Credentials are set on the config, not spliced into a DSN
// string, so any character in a password works.
func mysqlConfig(raw string) (*mysql.Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("cannot parse it")
	}
	if u.Host == "" {
		return nil, errors.New("names no host: use mysql://user:password@host:3306/database")
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "3306")
	}
	q := u.Query()
	q.Set("parseTime", "true")
	if q.Get("loc") == "" {
		q.Set("loc", "UTC")
	}
	db := strings.TrimPrefix(u.Path, "/")
	if strings.Contains(db, "/") {
		return nil, fmt.Errorf("database name %q has a slash", db)
	}
	cfg, err := mysql.ParseDSN("tcp(" + host + ")/" + url.PathEscape(db) + "?" + q.Encode())
	if err != nil {
		return nil, err
	}
	cfg.DBName = db
	if cfg.Timeout == 0 {
		// A dial that meets a silent network gives up instead of waiting
		// for the operating system's timeout; queries are bounded by
		// their contexts (the relay's DBTimeout).
		cfg.Timeout = ConnectTimeoutDefault
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	return cfg, nil
}

// Open connects to the database rawURL names and checks that it answers.
// The Closer closes the pool; for KindPostgres it is a PgPool, otherwise
// the *sql.DB.
func Open(ctx context.Context, rawURL string, opts Options) (outbox.Database, io.Closer, Kind, error) {
	c, err := Parse(rawURL)
	if err != nil {
		return nil, nil, "", err
	}
	timeout := opts.ConnectTimeout
	if timeout <= 0 {
		timeout = ConnectTimeoutDefault
	}
	pingCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch c.Kind {
	case KindPostgres:
		if opts.RelayID != "" {
			outbox.ConfigureRelayPool(c.Postgres, opts.RelayID)
		}
		if opts.MaxConns > 0 {
			c.Postgres.MaxConns = int32(min(opts.MaxConns, 1<<30))
		}
		pool, err := pgxpool.NewWithConfig(ctx, c.Postgres)
		if err != nil {
			return nil, nil, "", fmt.Errorf("connect to %s: %w", c.Redacted, err)
		}
		if err := pool.Ping(pingCtx); err != nil {
			pool.Close()
			return nil, nil, "", fmt.Errorf("connect to %s: %w", c.Redacted, err)
		}
		return outbox.Postgres(pool), PgPool{Pool: pool}, KindPostgres, nil
	case KindSQLite:
		db, err := sql.Open("sqlite", c.SQLiteDSN)
		if err == nil {
			err = db.PingContext(pingCtx)
		}
		if err != nil {
			if db != nil {
				_ = db.Close()
			}
			return nil, nil, "", fmt.Errorf("open %s: %w", c.Redacted, err)
		}
		setPoolSize(db, opts.MaxConns)
		return outbox.SQLite(db), db, KindSQLite, nil
	default:
		conn, err := mysql.NewConnector(c.MySQL)
		if err != nil {
			return nil, nil, "", fmt.Errorf("connect to %s: %w", c.Redacted, err)
		}
		db := sql.OpenDB(conn)
		setPoolSize(db, opts.MaxConns)
		db.SetConnMaxLifetime(MySQLConnMaxLifetime)
		if opts.Lazy {
			return outbox.MySQL(db), db, KindMySQL, nil
		}
		var version string
		if err := db.QueryRowContext(pingCtx, `SELECT VERSION()`).Scan(&version); err != nil {
			_ = db.Close()
			return nil, nil, "", fmt.Errorf("connect to %s: %w", c.Redacted, err)
		}
		kind := KindMySQL
		if strings.Contains(strings.ToLower(version), "mariadb") {
			kind = KindMariaDB
		}
		return outbox.MySQL(db), db, kind, nil
	}
}

// MySQLConnMaxLifetime is how long a MySQL connection is used before it is
// closed and replaced: shorter than the server's wait_timeout (8 hours by
// default) and than the idle timeouts of the proxies and load balancers in
// front of many servers (often 5 minutes), which would otherwise close an
// idle connection under the pool; go-sql-driver/mysql recommends a few
// minutes.
const MySQLConnMaxLifetime = 3 * time.Minute

// setPoolSize bounds a database/sql pool to n connections and keeps as
// many idle; n of 0 keeps database/sql's defaults.
func setPoolSize(db *sql.DB, n int) {
	if n > 0 {
		db.SetMaxOpenConns(n)
		db.SetMaxIdleConns(n)
	}
}

// PgPool closes a pgx pool as an io.Closer.
type PgPool struct{ *pgxpool.Pool }

// Close closes the pool.
func (p PgPool) Close() error {
	p.Pool.Close()
	return nil
}

// userinfo matches the credentials of a URL that net/url cannot parse.
var userinfo = regexp.MustCompile(`(://[^:/@]*):[^@]*@`)

// Redact returns rawURL with its password masked.
func Redact(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		return u.Redacted()
	}
	return userinfo.ReplaceAllString(rawURL, "$1:xxxxx@")
}
