// Package pgcluster runs a private PostgreSQL cluster for one test: initdb
// in the test's temporary directory, a postmaster on a free port of
// 127.0.0.1, and the controls a fault test needs (stop, start, crash with
// pg_ctl's immediate mode, restart). Tests that must restart or reconfigure
// a database use one instead of the shared server on 5432, which is never
// restarted.
//
// The cluster trusts every local connection (user postgres, no password)
// and trades durability for speed (fsync off, small buffers): a crash of
// the postmaster (immediate mode) loses nothing, since the operating system
// keeps the unflushed pages; only a crash of the machine would. It is
// stopped when the test ends, whatever happened.
//
// PostgreSQL refuses to run as root, so when the test runs as root the
// server programs run as the postgres OS user (runuser) in a directory
// made accessible to it.
package pgcluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/testutil/servers"
)

// BinDirDefault holds the server programs (initdb, pg_ctl) unless
// $OUTBOX_TEST_PG_BINDIR names another directory.
const BinDirDefault = "/usr/lib/postgresql/15/bin"

// EnvBinDir names the environment variable that overrides BinDirDefault.
const EnvBinDir = "OUTBOX_TEST_PG_BINDIR"

// OSUserDefault is the operating system user the server runs as when the
// test runs as root.
const OSUserDefault = "postgres"

// TimeoutDefault bounds each initdb and pg_ctl call unless Options.Timeout
// is set.
const TimeoutDefault = 60 * time.Second

// Options configure a cluster. The zero value is a small, fast cluster.
type Options struct {
	// Settings are server settings added to postgresql.conf, such as
	// {"wal_level": "logical", "max_replication_slots": "4"}; they win
	// over the package's own (BaseSettings).
	Settings map[string]string
	// Database is a database created once the cluster is up, and the one
	// URL names. Defaults to "postgres", which initdb creates.
	Database string
	// Timeout bounds each initdb and pg_ctl call. Defaults to
	// TimeoutDefault.
	Timeout time.Duration
}

// BaseSettings are the settings every cluster starts with: small and fast,
// not durable against a machine crash.
var BaseSettings = map[string]string{
	"listen_addresses":   "'127.0.0.1'",
	"max_connections":    "60",
	"shared_buffers":     "16MB",
	"fsync":              "off",
	"full_page_writes":   "off",
	"synchronous_commit": "on",
	"max_wal_size":       "256MB",
	"logging_collector":  "off",
	"log_min_messages":   "warning",
	"log_line_prefix":    "'%m [%p] '",
}

// Cluster is a running private PostgreSQL cluster.
type Cluster struct {
	// Port is the port the postmaster listens on, on 127.0.0.1.
	Port int

	dir     string // the data directory
	logFile string
	bin     string
	osUser  string // non-empty when the programs run through runuser
	db      string
	timeout time.Duration

	mu      sync.Mutex
	running bool
}

// Start creates a cluster in t's temporary directory, starts it and waits
// until it accepts connections; it fails t if it cannot, quoting the
// server's log. The cluster is stopped when t ends.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c := &Cluster{db: opts.Database, timeout: opts.Timeout}
	if c.db == "" {
		c.db = "postgres"
	}
	if c.timeout <= 0 {
		c.timeout = TimeoutDefault
	}
	c.bin = os.Getenv(EnvBinDir)
	if c.bin == "" {
		c.bin = BinDirDefault
	}
	if _, err := os.Stat(filepath.Join(c.bin, "initdb")); err != nil {
		t.Fatalf("pgcluster: initdb not found in %s: install PostgreSQL 15's server package (postgresql-15) or set %s to the directory of initdb and pg_ctl", c.bin, EnvBinDir)
	}
	root := t.TempDir()
	c.osUser = ServerDir(t, root)
	c.dir = filepath.Join(root, "data")
	c.logFile = filepath.Join(root, "server.log")
	if out, err := c.run(t, "initdb", "-D", c.dir, "-U", "postgres", "--auth=trust", "-E", "UTF8",
		"--locale=C", "--no-sync", "--no-instructions"); err != nil {
		t.Fatalf("pgcluster: initdb: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		c.mu.Lock()
		running := c.running
		c.mu.Unlock()
		if running {
			// Immediate: the data is thrown away anyway.
			if out, err := c.pgctl(t, "stop", "-m", "immediate"); err != nil {
				t.Errorf("pgcluster: stop: %v\n%s", err, out)
			}
		}
		if t.Failed() {
			t.Logf("pgcluster on port %d, server log:\n%s", c.Port, c.Log())
		}
	})

	settings := map[string]string{}
	for k, v := range BaseSettings {
		settings[k] = v
	}
	settings["unix_socket_directories"] = quote(root)
	for k, v := range opts.Settings {
		settings[k] = v
	}
	const attempts = 3
	for attempt := 1; ; attempt++ {
		c.Port = servers.FreePort(t)
		settings["port"] = strconv.Itoa(c.Port)
		if err := writeSettings(filepath.Join(c.dir, "postgresql.auto.conf"), settings); err != nil {
			t.Fatalf("pgcluster: %v", err)
		}
		err := c.start(t)
		if err == nil {
			break
		}
		if attempt == attempts || !strings.Contains(c.Log(), "could not bind") {
			t.Fatalf("pgcluster: %v", err)
		}
	}
	if c.db != "postgres" {
		if out, err := c.run(t, "psql", "-X", "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port), "-U", "postgres",
			"-d", "postgres", "-c", `CREATE DATABASE "`+strings.ReplaceAll(c.db, `"`, `""`)+`"`); err != nil {
			t.Fatalf("pgcluster: create database %s: %v\n%s", c.db, err, out)
		}
	}
	return c
}

// URL is the libpq URL of the cluster's database, for pgx or the outbox
// command.
func (c *Cluster) URL() string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: c.Addr(), Path: "/" + c.db,
		RawQuery: "sslmode=disable"}
	return u.String()
}

// Addr is 127.0.0.1:Port.
func (c *Cluster) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port)) }

// Log is what the server has logged so far.
func (c *Cluster) Log() string {
	b, err := os.ReadFile(c.logFile)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// Stop shuts the server down cleanly (pg_ctl's fast mode) and waits until
// it is gone. Connections are refused until Start.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	c.stop(t, "fast")
}

// Crash stops the server as a crash would (pg_ctl's immediate mode): every
// backend is killed without a checkpoint, and the next start runs crash
// recovery. Connections are refused until Start.
func (c *Cluster) Crash(t testing.TB) {
	t.Helper()
	c.stop(t, "immediate")
}

// Restart stops the server with pg_ctl's immediate mode and starts it
// again at once: `pg_ctl restart -m immediate`.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if out, err := c.pgctl(t, "restart", "-m", "immediate", "-l", c.logFile); err != nil {
		c.running = false
		t.Fatalf("pgcluster: restart: %v\n%s\nserver log:\n%s", err, out, c.Log())
	}
	c.running = true
}

// Start starts a stopped server again and waits until it accepts
// connections.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	if err := c.start(t); err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
}

// Exec runs sql in the cluster's database with psql, as the postgres
// database user, and fails t on an error.
func (c *Cluster) Exec(t testing.TB, sql string) {
	t.Helper()
	if out, err := c.run(t, "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port),
		"-U", "postgres", "-d", c.db, "-c", sql); err != nil {
		t.Fatalf("pgcluster: %s: %v\n%s", sql, err, out)
	}
}

func (c *Cluster) start(t testing.TB) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if out, err := c.pgctl(t, "start", "-l", c.logFile); err != nil {
		return fmt.Errorf("start: %w\n%s\nserver log:\n%s", err, out, c.Log())
	}
	c.running = true
	return nil
}

func (c *Cluster) stop(t testing.TB, mode string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if out, err := c.pgctl(t, "stop", "-m", mode); err != nil {
		t.Fatalf("pgcluster: stop -m %s: %v\n%s", mode, err, out)
	}
	c.running = false
}

// pgctl runs pg_ctl on the data directory, waiting for the action to end.
func (c *Cluster) pgctl(t testing.TB, action string, args ...string) ([]byte, error) {
	full := append([]string{action, "-D", c.dir, "-w", "-t", strconv.Itoa(int(c.timeout.Seconds()))}, args...)
	return c.run(t, "pg_ctl", full...)
}

// run runs one of the server programs, as the cluster's OS user.
func (c *Cluster) run(t testing.TB, program string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), c.timeout+10*time.Second)
	defer cancel()
	bin := filepath.Join(c.bin, program)
	if program == "psql" {
		if _, err := os.Stat(bin); err != nil {
			bin = "psql"
		}
	}
	var cmd *exec.Cmd
	if c.osUser != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", c.osUser, "--", bin}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, bin, args...)
	}
	cmd.Dir = filepath.Dir(c.dir)
	// The postmaster pg_ctl starts keeps no pipe of ours open for long,
	// but never wait on one.
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "PGTZ=UTC", "LC_ALL=C")
	return cmd.CombinedOutput()
}

// ServerDir prepares dir, a directory of t's, for a server program that
// refuses to run as root (postgres, pgbouncer): when the test runs as root,
// it hands dir to OSUserDefault and returns that user's name, for the
// program to run as with runuser; otherwise it returns "".
func ServerDir(t testing.TB, dir string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		return ""
	}
	if err := shareWith(dir, OSUserDefault); err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	return OSUserDefault
}

// shareWith hands dir to the OS user name and lets it reach dir through
// its parent (t.TempDir makes both private to the test's user).
func shareWith(dir, name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("the test runs as root, and the server must run as the OS user %s, which does not exist: %w", name, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return err
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return err
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(filepath.Dir(dir), 0o711)
}

// writeSettings writes settings to path, one name = value line each, in
// name order.
func writeSettings(path string, settings map[string]string) error {
	names := make([]string, 0, len(settings))
	for k := range settings {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("# Written by pgcluster.\n")
	for _, k := range names {
		fmt.Fprintf(&b, "%s = %s\n", k, settings[k])
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	// The file belongs to the server's OS user; writing keeps its owner.
	return os.WriteFile(path, []byte(b.String()), info.Mode().Perm())
}

// quote makes s a postgresql.conf string.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
