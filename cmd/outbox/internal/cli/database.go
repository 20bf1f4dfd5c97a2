package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cmd/outbox/internal/dburl"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
)

// connectTimeout bounds the first connection, so an unreachable host fails
// the command instead of hanging it.
const connectTimeout = 15 * time.Second

// errNoDatabase is the answer when no database URL was given.
var errNoDatabase = &usageError{err: errors.New("no database: pass --database-url or set " + EnvDatabaseURL + " (or database.url in the --config file)")}

// databaseURL returns --database-url, else $OUTBOX_DATABASE_URL, else the
// --config file's database.url; with none of them it is a usage error.
func (a *app) databaseURL() (string, error) {
	if len(a.databaseURLFlags) > 1 {
		return "", usagef("--database-url is given %d times: only outbox relay with --tenant-schemas or --tenant-query serves several databases; give one", len(a.databaseURLFlags))
	}
	u := a.databaseURLFlag
	if u == "" {
		u = os.Getenv(EnvDatabaseURL)
	}
	a.databaseURLName = "--database-url"
	if file, origin, ok := a.fileDatabaseURL(); ok && u == "" {
		u, a.databaseURLName = file, origin
	}
	if u == "" {
		return "", errNoDatabase
	}
	a.redact.addDatabaseURL(u)
	if a.pgbouncer && isSQLURL(u) {
		return "", usagef("invalid %s: PgBouncer pools PostgreSQL connections, and the database URL names %s; remove the flag", a.globalName("pgbouncer"), dburl.Redact(u))
	}
	return u, nil
}

// poolConfig parses the database URL. A URL that does not parse is a usage
// error; pgx masks its password and the redactor masks what pgx missed.
func (a *app) poolConfig() (*pgxpool.Config, error) {
	raw, err := a.databaseURL()
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return nil, usagef("invalid %s: %s", a.databaseURLName, parseErrorMessage(raw, err))
	}
	// The effective password may come from PGPASSWORD or a passfile.
	a.redact.add(cfg.ConnConfig.Password)
	if a.pgbouncer {
		outbox.ConfigurePgBouncer(cfg)
	}
	return cfg, nil
}

// parseErrorMessage explains why pgx could not parse raw. pgx masks the
// password only on a best-effort basis in a string it cannot parse, so the
// URL is shown with this package's own masking.
func parseErrorMessage(raw string, err error) string {
	msg := err.Error()
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return msg
	}
	scheme, _, _ := strings.Cut(raw, ":")
	if s := strings.ToLower(scheme); s != "postgres" && s != "postgresql" && !strings.Contains(raw, "=") {
		// Neither a PostgreSQL URL nor key=value settings: pgx's own
		// reason would be about key=value syntax.
		return fmt.Sprintf("`%s` is not a database URL: use postgres://user@host:5432/db, sqlite:///path/app.db, file:app.db or mysql://user@host:3306/db (or PostgreSQL key=value settings such as host=… dbname=…)", redactDatabaseURL(raw))
	}
	reason := msg
	if _, after, found := strings.Cut(msg, "`: "); found {
		reason = after
	}
	return fmt.Sprintf("cannot parse `%s`: %s", redactDatabaseURL(raw), reason)
}

// open connects a pool made from cfg and checks that the server answers.
func (a *app) open(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		if errors.Is(pgdriver.WrapConnectError(err), outbox.ErrPooler) && !a.pgbouncer {
			return nil, fmt.Errorf("connect to database: %w; the database URL reaches PgBouncer: pass --pgbouncer (no prepared statements, no startup parameters, no LISTEN)", err)
		}
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	a.logger.Debug("connected", "database", describeDatabase(cfg))
	return pool, nil
}

// isSQLURL reports whether raw names a database/sql database (SQLite,
// MySQL, MariaDB) rather than PostgreSQL.
func isSQLURL(raw string) bool {
	scheme, _, _ := strings.Cut(raw, ":")
	switch strings.ToLower(scheme) {
	case "sqlite", "file", "mysql", "mariadb":
		return true
	}
	return false
}

// parseDatabase parses the database URL the flags, environment or config
// file name, connecting to nothing: PostgreSQL as a pool config (its
// password redacted, PgBouncer mode applied), SQLite and MySQL/MariaDB with
// dburl. It returns the URL too.
func (a *app) parseDatabase() (*dburl.Config, string, error) {
	raw, err := a.databaseURL()
	if err != nil {
		return nil, "", err
	}
	if !isSQLURL(raw) {
		pc, err := a.poolConfig()
		if err != nil {
			return nil, "", err
		}
		return &dburl.Config{Kind: dburl.KindPostgres, Postgres: pc, Redacted: redactDatabaseURL(raw)}, raw, nil
	}
	db, err := dburl.Parse(raw)
	if err != nil {
		return nil, "", usagef("invalid %s: %w", a.databaseURLName, err)
	}
	return db, raw, nil
}

// openDatabase opens the database the flags name: PostgreSQL through a pgx
// pool as connect does, SQLite and MySQL/MariaDB through dburl. The closer
// closes the pool.
func (a *app) openDatabase(ctx context.Context) (outbox.Database, io.Closer, dburl.Kind, error) {
	c, raw, err := a.parseDatabase()
	if err != nil {
		return nil, nil, "", err
	}
	if c.Kind == dburl.KindPostgres {
		pool, err := a.open(ctx, c.Postgres)
		if err != nil {
			return nil, nil, "", err
		}
		return outbox.Postgres(pool), dburl.PgPool{Pool: pool}, dburl.KindPostgres, nil
	}
	db, closer, kind, err := dburl.Open(ctx, raw, dburl.Options{ConnectTimeout: connectTimeout})
	if err != nil {
		return nil, nil, "", err
	}
	a.logger.Debug("connected", "database", dburl.Redact(raw), "kind", string(kind))
	return db, closer, kind, nil
}

// manager connects and returns a Manager for --schema, after checking that
// the outbox table exists. Call the returned func to close the pool.
func (a *app) manager(ctx context.Context) (*outbox.Manager, func(), error) {
	m, _, closeDB, err := a.managerDB(ctx)
	return m, closeDB, err
}

// managerDB is manager that also returns the database.
func (a *app) managerDB(ctx context.Context) (*outbox.Manager, outbox.Database, func(), error) {
	db, closer, _, err := a.openDatabase(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	closeDB := func() { _ = closer.Close() }
	m := outbox.NewManager(db, outbox.ManagerConfig{Schema: a.schema})
	if err := m.Ping(ctx); err != nil {
		closeDB()
		return nil, nil, nil, a.tableError(err)
	}
	return m, db, closeDB, nil
}

// tableError tells the operator how to create a missing outbox table.
func (a *app) tableError(err error) error {
	if !errors.Is(err, outbox.ErrNoTable) {
		return err
	}
	hint := "run outbox migrate"
	if a.schema != outbox.SchemaDefault {
		hint += " --schema " + a.schema
	}
	return fmt.Errorf("%w: %s", err, hint)
}

// describeDatabase names the database without credentials.
func describeDatabase(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	return fmt.Sprintf("%s:%d/%s", c.Host, c.Port, c.Database)
}
