// Package testutil gives tests a real PostgreSQL: a shared pool and a fresh,
// migrated schema per test so every test can run in parallel.
package testutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil/tcpproxy"
)

// DatabaseURLDefault is the local test database.
const DatabaseURLDefault = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// DatabaseURL is TEST_DATABASE_URL, or DatabaseURLDefault.
func DatabaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DatabaseURLDefault
}

var (
	poolOnce sync.Once
	pool     *pgxpool.Pool
	poolErr  error
)

// Pool returns a pool shared by the test binary. A missing database fails
// the test with a message saying how to start one; it never skips.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	poolOnce.Do(func() {
		cfg, err := pgxpool.ParseConfig(DatabaseURL())
		if err != nil {
			poolErr = err
			return
		}
		cfg.MaxConns = 24
		cfg.ConnConfig.RuntimeParams["application_name"] = "outbox-test"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pool, poolErr = pgxpool.NewWithConfig(ctx, cfg)
		if poolErr == nil {
			poolErr = pool.Ping(ctx)
		}
	})
	if poolErr != nil {
		t.Fatalf("PostgreSQL is not reachable at TEST_DATABASE_URL (default %s): %v; start it with scripts/test or set TEST_DATABASE_URL", DatabaseURLDefault, poolErr)
	}
	return pool
}

// NewPool returns a pool of its own for t, closed at cleanup, whose
// connections carry applicationName (so a test can terminate them).
func NewPool(t testing.TB, applicationName string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = applicationName
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// RolePool creates a login role named role, runs grants (statements that
// name it as pgx.Identifier{role}.Sanitize()), and returns a pool of its
// own connected as that role, closed at cleanup, after which the role and
// what it owns are dropped. The test database must let the role log in
// without a password (trust, as scripts/test sets it up).
func RolePool(t testing.TB, admin *pgxpool.Pool, role string, grants ...string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	r := pgx.Identifier{role}.Sanitize()
	if _, err := admin.Exec(ctx, `CREATE ROLE `+r+` LOGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `DROP OWNED BY `+r)
		_, _ = admin.Exec(context.Background(), `DROP ROLE `+r)
	})
	for _, g := range grants {
		if _, err := admin.Exec(ctx, g); err != nil {
			t.Fatalf("%s: %v", g, err)
		}
	}
	cfg, err := pgxpool.ParseConfig(DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User, cfg.ConnConfig.Password = role, ""
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close) // before the role is dropped: cleanups run last first
	return p
}

// ProxiedPoolConfig returns a pool configuration for the test database
// whose connections go through a proxy of t's own, to cut or silence.
func ProxiedPoolConfig(t testing.TB) (*pgxpool.Config, *tcpproxy.Proxy) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := tcpproxy.Start(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	host, port, err := net.SplitHostPort(proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	return cfg, proxy
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// SchemaName returns a unique schema name derived from the test's name.
func SchemaName(t testing.TB) string {
	base := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(base) > 40 {
		base = base[:40]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "t_" + base + "_" + hex.EncodeToString(b[:])
}

// Schema creates a fresh schema holding a migrated outbox table, dropped
// when the test ends, and returns the shared pool and the schema's name.
func Schema(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	p := Pool(t)
	schema := SchemaName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pgdriver.Migrate(ctx, p, schema); err != nil {
		t.Fatalf("migrate %s: %v", schema, err)
	}
	t.Cleanup(func() { DropSchema(t, p, schema) })
	return p, schema
}

// EmptySchemaName returns a unique schema name that is dropped (if it was
// created) when the test ends.
func EmptySchemaName(t testing.TB) string {
	p := Pool(t)
	schema := SchemaName(t)
	t.Cleanup(func() { DropSchema(t, p, schema) })
	return schema
}

// DropSchema drops schema and everything in it.
func DropSchema(t testing.TB, p *pgxpool.Pool, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
	}
}

// Table returns the quoted outbox_events table of schema.
func Table(schema string) string { return pgx.Identifier{schema, "outbox_events"}.Sanitize() }

// WaitFor polls cond every 10ms until it is true or timeout passes, then
// fails the test with msg.
func WaitFor(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BlackholeFor is how long the half-open tests keep the network silent:
// 5s, or $OUTBOX_TEST_BLACKHOLE (30s is the figure docs/operations.md
// promises recovery from).
func BlackholeFor(t testing.TB) time.Duration {
	t.Helper()
	v := os.Getenv("OUTBOX_TEST_BLACKHOLE")
	if v == "" {
		return 5 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("OUTBOX_TEST_BLACKHOLE=%q: %v", v, err)
	}
	return d
}
