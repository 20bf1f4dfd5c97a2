package drivertest_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/internal/driver/mysqldriver"
)

// questions is the session's count of statements the server ran for
// the client (Questions), read on db's one connection.
func questions(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var (
		name string
		n    int64
	)
	require.NoError(t, db.QueryRowContext(context.Background(), "SHOW SESSION STATUS LIKE 'Questions'").Scan(&name, &n))
	return n
}

// On MySQL and MariaDB, CountSchemas counts many tenant databases with one
// statement per chunk, counted by the server itself, and each database's
// counts are what its own Stats and DeadLetterRetryStats read, a database
// named to inject SQL included.
func TestCountSchemasMySQLOneStatementPerChunk(t *testing.T) {
	t.Parallel()
	m := setupMySQLTenants(t)
	schemas := []string{m.tenant(t, "a"), m.tenant(t, "b"), m.tenant(t, "x`; drop table y; --"), m.tenant(t, "d"), m.tenant(t, "e")}
	statuses := []string{"pending", "processing", "processed", "failed"}
	for i, s := range schemas {
		// i*7 events of every status, due i minutes ago, and failed ones
		// with a slow retry scheduled in database i > 2.
		table := "`" + strings.ReplaceAll(s, "`", "``") + "`.`outbox_events`"
		for g := 1; g <= i*7; g++ {
			retry := "NULL"
			if i > 2 && g%4 == 3 {
				retry = fmt.Sprintf("UTC_TIMESTAMP(6) + INTERVAL %d HOUR", g)
			}
			_, err := m.db.ExecContext(m.ctx, "INSERT INTO "+table+` (event_type, aggregate_type, aggregate_id, payload, status, created_at, available_at, dead_letter_retry_at)
VALUES ('x', 't', '1', '{}', ?, UTC_TIMESTAMP(6) - INTERVAL ? MINUTE, UTC_TIMESTAMP(6) - INTERVAL ? MINUTE, `+retry+`)`, statuses[g%4], i, i)
			require.NoError(t, err)
		}
	}
	cfg, err := mysql.ParseDSN(drivertest.MySQLDSN())
	require.NoError(t, err)
	cfg.ParseTime, cfg.Loc, cfg.DBName = true, time.UTC, ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(1) // one session, whose Questions count every statement
	drv := mysqldriver.New(db, "")
	var _ driver.TenantCounter = drv

	// Two readings of Questions in a row differ by the reading's own
	// statement: what a count adds beyond that is its own statements.
	idle := -questions(t, db) + questions(t, db)
	for _, tc := range []struct{ chunk, statements int }{{2, 3}, {5, 1}, {mysqldriver.StatsChunk, 1}} {
		before := questions(t, db)
		got, err := drv.CountSchemasChunked(m.ctx, schemas, tc.chunk)
		require.NoError(t, err)
		require.Equal(t, int64(tc.statements), questions(t, db)-before-idle, "chunk %d", tc.chunk)
		require.Len(t, got, len(schemas))
		for i, s := range schemas {
			one := mysqldriver.New(db, s)
			st, err := one.Stats(m.ctx)
			require.NoError(t, err)
			dl, err := one.DeadLetterRetryStats(m.ctx)
			require.NoError(t, err)
			require.Equal(t, s, got[i].Schema)
			require.Equal(t, [4]int64{st.Pending, st.Processing, st.Processed, st.Failed},
				[4]int64{got[i].Pending, got[i].Processing, got[i].Processed, got[i].Failed}, s)
			require.InDelta(t, st.OldestPendingAge.Seconds(), got[i].OldestPendingAge.Seconds(), 5, s)
			require.Equal(t, dl, got[i].DeadLetterRetry, s)
			if i > 0 {
				require.Positive(t, got[i].Pending+got[i].Processing+got[i].Processed+got[i].Failed, "a test that counts something")
			}
			if i > 2 {
				require.Positive(t, got[i].DeadLetterRetry.Waiting, "a scheduled slow retry counted")
				require.False(t, got[i].DeadLetterRetry.NextDue.IsZero())
				require.InDelta(t, float64(i*60), got[i].OldestPendingAge.Seconds(), 5, s)
			}
		}
	}

	// A database without an outbox fails the statement, and says so.
	_, err = drv.CountSchemas(m.ctx, append(schemas, m.prefix+"none"))
	require.ErrorIs(t, err, driver.ErrNoTable)
}
