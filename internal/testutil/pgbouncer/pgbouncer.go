// Package pgbouncer runs a PgBouncer of the test's own in front of a
// PostgreSQL server: its configuration and user list in the test's
// temporary directory, a free port of 127.0.0.1, transaction pooling unless
// told otherwise, stopped when the test ends. Tests of the relay's
// PgBouncer mode use it; it runs Debian's pgbouncer package, which
// scripts/test installs when it is missing.
package pgbouncer

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/testutil/pgcluster"
	"github.com/outboxkit/outbox/internal/testutil/servers"
)

// Binary is where Debian's pgbouncer package installs the program.
const Binary = "/usr/sbin/pgbouncer"

// Options configure a PgBouncer. The zero value pools in transaction mode.
type Options struct {
	// PoolMode is pool_mode: transaction (the default), session or
	// statement.
	PoolMode string
	// PoolSize is default_pool_size, the server connections per database
	// and user. Defaults to 3, few enough that a client's transactions run
	// on different server connections.
	PoolSize int
	// IgnoreStartupParameters is added to ignore_startup_parameters
	// (extra_float_digits is always there), such as "synchronous_commit".
	IgnoreStartupParameters []string
}

// Bouncer is a running PgBouncer.
type Bouncer struct {
	// Addr is 127.0.0.1:port.
	Addr string
	srv  *servers.Server
}

// Start starts a PgBouncer that forwards every database to the server of
// serverURL (a postgres:// URL whose user the server trusts), and waits
// until it answers; it is killed when t ends. A missing pgbouncer fails t
// with a message saying what to install; it never skips.
func Start(t testing.TB, serverURL string, opts Options) *Bouncer {
	t.Helper()
	if _, err := os.Stat(Binary); err != nil {
		t.Fatalf("pgbouncer is not installed (%s): apt-get install pgbouncer (scripts/test does it when it is missing)", Binary)
	}
	cfg, err := pgx.ParseConfig(serverURL)
	if err != nil {
		t.Fatalf("pgbouncer: server URL: %v", err)
	}
	if opts.PoolMode == "" {
		opts.PoolMode = "transaction"
	}
	if opts.PoolSize == 0 {
		opts.PoolSize = 3
	}
	dir := t.TempDir()
	runAs := pgcluster.ServerDir(t, dir)
	ini := filepath.Join(dir, "pgbouncer.ini")
	users := filepath.Join(dir, "userlist.txt")
	writeFile(t, users, fmt.Sprintf("%q \"\"\n", cfg.User))
	ignore := append([]string{"extra_float_digits"}, opts.IgnoreStartupParameters...)
	spec := servers.Spec{
		Name: "pgbouncer", Binary: Binary,
		Args: func(port int) []string {
			writeFile(t, ini, fmt.Sprintf(`[databases]
* = host=%s port=%d
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 200
ignore_startup_parameters = %s
server_reset_query =
logfile =
pidfile =
`, cfg.Host, cfg.Port, port, users, opts.PoolMode, opts.PoolSize, strings.Join(ignore, ",")))
			return []string{ini}
		},
		Ready: func(ctx context.Context, addr string) error {
			u := bouncerURL(cfg, addr, cfg.Database)
			conn, err := pgx.Connect(ctx, u)
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close(ctx) }()
			return conn.Ping(ctx)
		},
	}
	if runAs != "" {
		// PgBouncer refuses to run as root.
		spec.Binary = "/usr/sbin/runuser"
		args := spec.Args
		spec.Args = func(port int) []string { return append([]string{"-u", runAs, "--", Binary}, args(port)...) }
	}
	srv := servers.Start(t, spec)
	return &Bouncer{Addr: srv.Addr, srv: srv}
}

// URL is serverURL with its host and port replaced by the PgBouncer's.
func (b *Bouncer) URL(t testing.TB, serverURL string) string {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatalf("pgbouncer: %v", err)
	}
	u.Host = b.Addr
	return u.String()
}

// Output is what PgBouncer logged so far.
func (b *Bouncer) Output() string { return b.srv.Output() }

func bouncerURL(cfg *pgx.ConnConfig, addr, database string) string {
	u := url.URL{Scheme: "postgres", User: url.User(cfg.User), Host: addr, Path: "/" + database,
		RawQuery: "sslmode=disable&default_query_exec_mode=exec"}
	return u.String()
}

func writeFile(t testing.TB, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatalf("pgbouncer: %v", err)
	}
}
