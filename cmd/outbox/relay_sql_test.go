package main_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/internal/testutil"
)

// TestRelayOnSQLDatabases runs `outbox relay` on SQLite and MariaDB: two
// relay processes on one database publish every committed event to a
// webhook.
func TestRelayOnSQLDatabases(t *testing.T) {
	t.Parallel()
	cases := map[string]func(t *testing.T) (string, *sql.DB, outbox.Database, outbox.Dialect){
		"sqlite": func(t *testing.T) (string, *sql.DB, outbox.Database, outbox.Dialect) {
			path := filepath.Join(t.TempDir(), "app.db")
			db := drivertest.OpenSQLiteFile(t, path)
			return "sqlite://" + path, db, outbox.SQLite(db), outbox.DialectSQLite
		},
		"mariadb": func(t *testing.T) (string, *sql.DB, outbox.Database, outbox.Dialect) {
			name, db := drivertest.MySQLDatabase(t)
			return "mysql://root@127.0.0.1:3306/" + name, db, outbox.MySQL(db), outbox.DialectMariaDB
		},
	}
	for name, open := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dbURL, sqlDB, db, dialect := open(t)
			requireOK(t, run(t, nil, "--database-url", dbURL, "migrate"))

			const n = 30
			w := outbox.NewWriter(outbox.WriterConfig{Dialect: dialect})
			ctx := context.Background()
			tx, err := sqlDB.BeginTx(ctx, nil)
			require.NoError(t, err)
			msgs := make([]outbox.Message, n)
			for i := range msgs {
				msgs[i] = outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: fmt.Sprint(i), Payload: map[string]int{"i": i}}
			}
			_, err = w.WriteSQL(ctx, tx, msgs...)
			require.NoError(t, err)
			require.NoError(t, tx.Commit())

			srv := newGateServer(t)
			srv.letThrough()
			for i := range 2 {
				p := start(t, nil, "--database-url", dbURL, "relay", "--sink", srv.URL, "--relay-id", fmt.Sprint(name, "-", i),
					"--batch-size", "7", "--poll-interval", "20ms", "--log-level", "warn")
				t.Cleanup(func() { _ = p.stop(t, syscall.SIGTERM) })
			}
			mgr := outbox.NewManager(db, outbox.ManagerConfig{})
			testutil.WaitFor(t, 30*time.Second, "every event processed", func() bool {
				s, err := mgr.Stats(ctx)
				require.NoError(t, err)
				return s.Processed == n && s.Processing == 0
			})
			acked := srv.ackedIDs()
			require.Len(t, acked, n)
			for id, count := range acked {
				require.Equal(t, 1, count, "event %d delivered more than once", id)
			}
		})
	}
}
