package drivertest_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/outboxtest"
)

// mysqlTenants is a set of tenant databases sharing a unique prefix, so
// that a glob of the prefix finds the test's tenants and no other test's.
type mysqlTenants struct {
	ctx    context.Context
	db     *sql.DB // connected without a current database
	prefix string
}

func setupMySQLTenants(t *testing.T) mysqlTenants {
	t.Helper()
	cfg, err := mysql.ParseDSN(drivertest.MySQLDSN())
	require.NoError(t, err)
	cfg.ParseTime, cfg.Loc, cfg.DBName = true, time.UTC, ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	var b [4]byte
	_, _ = rand.Read(b[:])
	return mysqlTenants{ctx: context.Background(), db: db, prefix: "tn_" + hex.EncodeToString(b[:]) + "_"}
}

// tenant creates and migrates the tenant database prefix+name, dropped
// when the test ends, and returns its name.
func (m mysqlTenants) tenant(t *testing.T, name string) string {
	t.Helper()
	s := m.prefix + name
	quoted := "`" + strings.ReplaceAll(s, "`", "``") + "`"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := m.db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+quoted)
		require.NoError(t, err)
	})
	_, err := m.db.ExecContext(m.ctx, "CREATE DATABASE "+quoted+" CHARACTER SET utf8mb4")
	require.NoError(t, err)
	_, err = outboxmigrate.Migrate(m.ctx, outbox.MySQL(m.db), outboxmigrate.Config{Schema: s})
	require.NoError(t, err)
	return s
}

// insert writes n events into the tenant's outbox with plain SQL, as a
// writer in any language does.
func (m mysqlTenants) insert(t *testing.T, schema string, n int) {
	t.Helper()
	quoted := "`" + strings.ReplaceAll(schema, "`", "``") + "`.`outbox_events`"
	for i := range n {
		_, err := m.db.ExecContext(m.ctx, "INSERT INTO "+quoted+" (event_type, aggregate_type, aggregate_id, payload) VALUES ('thing.happened', 'thing', ?, ?)",
			fmt.Sprint(i), fmt.Sprintf(`{"i": %d}`, i))
		require.NoError(t, err)
	}
}

// On MySQL and MariaDB a tenant's "schema" is a database: discovery finds
// the databases matching the glob that hold an outbox, one relay serves
// them all with each event's tenant, a tenant created while it runs is
// served within a refresh, and a database named to inject SQL is served
// like any other.
func TestTenantsMySQLServeEachDatabaseWithItsTenant(t *testing.T) {
	t.Parallel()
	m := setupMySQLTenants(t)
	a, b := m.tenant(t, "a"), m.tenant(t, "x`; drop table y; --")
	quoted := "`" + m.prefix + "empty`"
	_, err := m.db.ExecContext(m.ctx, "CREATE DATABASE "+quoted)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = m.db.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+quoted) })
	db := outbox.MySQL(m.db)

	got, err := outbox.DiscoverTenants(m.ctx, db, m.prefix+"*", "")
	require.NoError(t, err)
	require.Equal(t, []string{a, b}, got, "the database without an outbox is not a tenant")
	listed, err := outbox.ListTenants(m.ctx, db, m.prefix+"*", "")
	require.NoError(t, err)
	require.Equal(t, []string{a, m.prefix + "empty", b}, listed, "every matching database, to migrate")
	got, err = outbox.DiscoverTenants(m.ctx, db, "", "SELECT '"+a+"' UNION ALL SELECT 'nope'")
	require.NoError(t, err)
	require.Equal(t, []string{a}, got)

	m.insert(t, a, 5)
	m.insert(t, b, 7)
	rec := outboxtest.NewRecorder()
	ts, err := outbox.NewTenants(db, outbox.TenantsConfig{
		Relay:   outbox.RelayConfig{Sink: rec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Schemas: m.prefix + "*", Refresh: 100 * time.Millisecond, ScanInterval: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, ts.Start(m.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, ts.Stop(ctx))
	})
	rec.WaitLen(t, 12, 20*time.Second)

	c := m.tenant(t, "c")
	m.insert(t, c, 3)
	rec.WaitLen(t, 15, 20*time.Second)
	perTenant := map[string]map[int64]int{}
	unique := map[string]bool{}
	for _, e := range rec.Events() {
		if perTenant[e.Tenant] == nil {
			perTenant[e.Tenant] = map[int64]int{}
		}
		perTenant[e.Tenant][e.ID]++
		unique[e.UniqueID()] = true
	}
	require.Len(t, unique, 15, "ids qualified by tenant: none shared")
	require.Len(t, perTenant, 3)
	for s, n := range map[string]int{a: 5, b: 7, c: 3} {
		require.Len(t, perTenant[s], n, "every event of %q, each once", s)
	}
	require.ElementsMatch(t, []string{a, b, c}, ts.Schemas())

	// Per-tenant stats are the SQL counts, once every delivered event is
	// marked (the sink sees an event before its mark commits).
	for _, s := range []string{a, b, c} {
		require.Eventually(t, func() bool {
			var left int
			require.NoError(t, m.db.QueryRowContext(m.ctx, "SELECT COUNT(*) FROM `"+strings.ReplaceAll(s, "`", "``")+"`.`outbox_events` WHERE status <> 'processed'").Scan(&left))
			return left == 0
		}, 20*time.Second, 20*time.Millisecond, "%s: every event marked processed", s)
	}
	_, err = m.db.ExecContext(m.ctx, "UPDATE `"+m.prefix+"a`.`outbox_events` SET status = 'failed' WHERE id <= 2")
	require.NoError(t, err)
	counts, err := outbox.NewManager(db, outbox.ManagerConfig{}).TenantStats(m.ctx, []string{a, b, c})
	require.NoError(t, err)
	for _, st := range counts {
		var want [4]int64
		require.NoError(t, m.db.QueryRowContext(m.ctx, "SELECT COALESCE(SUM(status = 'pending'), 0), COALESCE(SUM(status = 'processing'), 0), "+
			"COALESCE(SUM(status = 'processed'), 0), COALESCE(SUM(status = 'failed'), 0) FROM `"+strings.ReplaceAll(st.Schema, "`", "``")+"`.`outbox_events`").
			Scan(&want[0], &want[1], &want[2], &want[3]))
		require.Equal(t, want, [4]int64{st.Pending, st.Processing, st.Processed, st.Failed}, st.Schema)
	}
	require.Equal(t, int64(2), counts[0].Failed)
}
