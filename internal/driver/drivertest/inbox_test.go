package drivertest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// inboxDB is one database/sql database with the inbox migrated, and a
// second pool on it, as a second consumer process would have.
type inboxDB struct {
	db, other *sql.DB
	dialect   outbox.Dialect
	database  outbox.Database
	backdate  string // sets processed_at 8 days back for message_id ?
	// backdateReport sets reported_at 16 s back for consumer ?.
	backdateReport string
}

func inboxDatabases() map[string]func(t *testing.T) inboxDB {
	return map[string]func(t *testing.T) inboxDB{
		"sqlite": func(t *testing.T) inboxDB {
			path := filepath.Join(t.TempDir(), "consumer.db")
			db := drivertest.OpenSQLiteFile(t, path)
			return inboxDB{db: db, other: drivertest.OpenSQLiteFile(t, path), dialect: outbox.DialectSQLite, database: outbox.SQLite(db),
				backdate:       `UPDATE inbox_messages SET processed_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '-8 days') WHERE message_id = ?`,
				backdateReport: `UPDATE inbox_consumers SET reported_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '-16 seconds') WHERE consumer = ?`}
		},
		"mariadb": func(t *testing.T) inboxDB {
			name, db := drivertest.MySQLDatabase(t)
			cfg, err := mysql.ParseDSN(drivertest.MySQLDSN())
			require.NoError(t, err)
			cfg.DBName, cfg.ParseTime, cfg.Loc = name, true, time.UTC
			// The second pool reports found rows instead of changed rows,
			// which must not make a duplicate look new.
			cfg.ClientFoundRows = true
			other, err := sql.Open("mysql", cfg.FormatDSN())
			require.NoError(t, err)
			t.Cleanup(func() { _ = other.Close() })
			return inboxDB{db: db, other: other, dialect: outbox.DialectMariaDB, database: outbox.MySQL(db),
				backdate:       "UPDATE `inbox_messages` SET `processed_at` = UTC_TIMESTAMP(6) - INTERVAL 8 DAY WHERE `message_id` = ?",
				backdateReport: "UPDATE `inbox_consumers` SET `reported_at` = UTC_TIMESTAMP(6) - INTERVAL 16 SECOND WHERE `consumer` = ?"}
		},
	}
}

func setupInbox(t *testing.T, open func(t *testing.T) inboxDB) (inboxDB, *inbox.Inbox) {
	t.Helper()
	ctx := context.Background()
	d := open(t)
	res, err := outboxmigrate.MigrateInbox(ctx, d.database, outboxmigrate.Config{})
	require.NoError(t, err)
	require.Equal(t, []outboxmigrate.Migration{{Version: 1, Name: "create_inbox_messages"}, {Version: 2, Name: "create_inbox_consumers"}}, res.Applied)
	again, err := outboxmigrate.MigrateInbox(ctx, d.database, outboxmigrate.Config{})
	require.NoError(t, err)
	require.Empty(t, again.Applied)
	v, err := outboxmigrate.Version(ctx, d.database, outboxmigrate.Config{})
	require.NoError(t, err)
	require.Zero(t, v, "the outbox's track is apart")
	_, err = d.db.ExecContext(ctx, `CREATE TABLE effects (message_id VARCHAR(255) NOT NULL)`)
	require.NoError(t, err)
	in, err := inbox.New(inbox.Config{Consumer: "billing", Dialect: d.dialect})
	require.NoError(t, err)
	return d, in
}

func countEffects(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(context.Background(), `SELECT count(*) FROM effects`).Scan(&n))
	return n
}

func applyEffect(id string) func(ctx context.Context, tx *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (message_id) VALUES (?)`, id)
		return err
	}
}

func inboxMessage(id string) inbox.Message {
	return inbox.Message{Source: "/outbox", ID: id, EventType: "order.created", Payload: []byte(`{"n":1}`), Headers: map[string]string{"a": "b"}}
}

func TestInboxSQLDatabases(t *testing.T) {
	t.Parallel()
	for name, open := range inboxDatabases() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("same message five times", func(t *testing.T) {
				t.Parallel()
				d, in := setupInbox(t, open)
				for i := range 5 {
					db := d.db
					if i%2 == 1 {
						db = d.other
					}
					res, err := in.HandleSQL(context.Background(), db, inboxMessage("17"), applyEffect("17"))
					require.NoError(t, err)
					require.Equal(t, i > 0, res.Duplicate, "delivery %d", i+1)
				}
				require.Equal(t, 1, countEffects(t, d.db))
			})
			t.Run("concurrent deliveries from two pools", func(t *testing.T) {
				t.Parallel()
				d, in := setupInbox(t, open)
				const messages, deliveries = 15, 4
				var (
					wg  sync.WaitGroup
					ran atomic.Int64
				)
				for i := range deliveries {
					db := []*sql.DB{d.db, d.other}[i%2]
					wg.Go(func() {
						for n := range messages {
							id := fmt.Sprint(n)
							_, err := in.HandleSQL(context.Background(), db, inboxMessage(id), func(ctx context.Context, tx *sql.Tx) error {
								ran.Add(1)
								return applyEffect(id)(ctx, tx)
							})
							if err != nil {
								t.Errorf("deliver %s: %v", id, err)
								return
							}
						}
					})
				}
				wg.Wait()
				require.Equal(t, int64(messages), ran.Load())
				require.Equal(t, messages, countEffects(t, d.db))
			})
			t.Run("handler error rolls back", func(t *testing.T) {
				t.Parallel()
				d, in := setupInbox(t, open)
				boom := errors.New("boom")
				_, err := in.HandleSQL(context.Background(), d.db, inboxMessage("5"), func(ctx context.Context, tx *sql.Tx) error {
					require.NoError(t, applyEffect("5")(ctx, tx))
					return boom
				})
				require.ErrorIs(t, err, boom)
				require.Zero(t, countEffects(t, d.db))
				res, err := in.HandleSQL(context.Background(), d.db, inboxMessage("5"), applyEffect("5"))
				require.NoError(t, err)
				require.False(t, res.Duplicate)
				res, err = in.HandleSQL(context.Background(), d.other, inboxMessage("5"), applyEffect("5"))
				require.NoError(t, err)
				require.True(t, res.Duplicate)
				require.Equal(t, 1, countEffects(t, d.db))
			})
			t.Run("store a batch in one transaction", func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				d, in := setupInbox(t, open)
				_, err := in.StoreSQL(ctx, d.db, inboxMessage("1"))
				require.NoError(t, err)
				results, err := in.StoreBatchSQL(ctx, d.db, []inbox.Message{inboxMessage("1"), inboxMessage("2"), inboxMessage("3"), inboxMessage("2")})
				require.NoError(t, err)
				var dups []bool
				for _, r := range results {
					dups = append(dups, r.Duplicate)
				}
				require.Equal(t, []bool{true, false, false, true}, dups, "stored before, new, new, earlier in the batch")
				_, err = in.StoreBatchSQL(ctx, d.db, []inbox.Message{inboxMessage("4"), {Source: "/outbox"}})
				require.Error(t, err)
				var n int
				require.NoError(t, d.db.QueryRowContext(ctx, `SELECT count(*) FROM inbox_messages`).Scan(&n))
				require.Equal(t, 3, n)
			})
			t.Run("store, lag and purge", func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				d, in := setupInbox(t, open)
				for _, id := range []string{"1", "2", "2"} {
					_, err := in.StoreSQL(ctx, d.db, inboxMessage(id))
					require.NoError(t, err)
				}
				_, err := in.RecordSQL(ctx, d.db, inboxMessage("3"))
				require.NoError(t, err)
				lag, err := inbox.Lag(ctx, d.database, "")
				require.NoError(t, err)
				require.Len(t, lag, 1)
				require.Equal(t, int64(2), lag[0].Unprocessed)
				require.Less(t, lag[0].OldestUnprocessedAge, time.Minute)

				_, err = d.db.ExecContext(ctx, d.backdate, "3")
				require.NoError(t, err)
				n, err := inbox.Purge(ctx, d.database, inbox.PurgeConfig{OlderThan: 7 * 24 * time.Hour, Consumer: "billing"})
				require.NoError(t, err)
				require.Equal(t, int64(1), n, "only the processed message past the window")
				var left int
				require.NoError(t, d.db.QueryRowContext(ctx, `SELECT count(*) FROM inbox_messages`).Scan(&left))
				require.Equal(t, 2, left)
			})
			// The receiver's broker reports (inbox migration 002): one
			// row per consumer, replaced on each report, aged by the
			// database clock and stale past three poll intervals; an inbox
			// without the table has none, and reporting names the fix.
			t.Run("broker reports", func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				d, _ := setupInbox(t, open)
				reports, err := inbox.BrokerReports(ctx, d.database, "")
				require.NoError(t, err)
				require.Empty(t, reports)
				for _, r := range []inbox.BrokerReport{
					{Consumer: "billing", Broker: "nats", Pending: 7, Interval: 5 * time.Second},
					{Consumer: "audit", Broker: "kafka", Pending: 3, Interval: 5 * time.Second},
					{Consumer: "billing", Broker: "nats", Pending: 2, Interval: 5 * time.Second},
				} {
					require.NoError(t, inbox.ReportBroker(ctx, d.database, "", r))
				}
				reports, err = inbox.BrokerReports(ctx, d.database, "")
				require.NoError(t, err)
				require.Len(t, reports, 2)
				require.Equal(t, "audit", reports[0].Consumer)
				require.Equal(t, "kafka", reports[0].Broker)
				require.Equal(t, int64(3), reports[0].Pending)
				billing := reports[1]
				require.Equal(t, "billing", billing.Consumer)
				require.Equal(t, int64(2), billing.Pending, "the latest report replaced the first")
				require.Equal(t, 5*time.Second, billing.Interval)
				require.Less(t, billing.Age, 5*time.Second)
				require.False(t, billing.Stale())

				_, err = d.db.ExecContext(ctx, d.backdateReport, "billing")
				require.NoError(t, err)
				reports, err = inbox.BrokerReports(ctx, d.database, "")
				require.NoError(t, err)
				require.InDelta(t, 16, reports[1].Age.Seconds(), 5)
				require.True(t, reports[1].Stale(), "16 s is more than three 5 s intervals")
				require.False(t, reports[0].Stale())

				_, err = d.db.ExecContext(ctx, `DROP TABLE inbox_consumers`)
				require.NoError(t, err)
				reports, err = inbox.BrokerReports(ctx, d.database, "")
				require.NoError(t, err)
				require.Nil(t, reports, "an inbox before migration 002 has no reports")
				err = inbox.ReportBroker(ctx, d.database, "", inbox.BrokerReport{Consumer: "billing", Broker: "nats", Pending: 1, Interval: time.Second})
				require.ErrorIs(t, err, inbox.ErrNoTable)
				require.ErrorContains(t, err, "run outbox migrate --inbox")
			})
		})
	}
}
