package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxmigrate"
)

type bundle struct {
	pool    *pgxpool.Pool
	schema  string
	effects string // quoted table the handlers insert into, without a unique key
	inbox   *inbox.Inbox
}

// setup migrates the inbox into a schema of the test's own and creates an
// effects table with no key of its own: only the inbox keeps a duplicate
// out of it.
func setup(t *testing.T, cfg inbox.Config) *bundle { return setupB(t, cfg) }

func setupB(t testing.TB, cfg inbox.Config) *bundle {
	t.Helper()
	ctx := context.Background()
	pool := testutil.Pool(t)
	schema := testutil.EmptySchemaName(t)
	res, err := outboxmigrate.MigrateInbox(ctx, outbox.Postgres(pool), outboxmigrate.Config{Schema: schema})
	require.NoError(t, err)
	require.Equal(t, 2, res.Version)
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	_, err = pool.Exec(ctx, `CREATE TABLE `+effects+` (message_id text NOT NULL, consumer text NOT NULL)`)
	require.NoError(t, err)
	cfg.Schema = schema
	in, err := inbox.New(cfg)
	require.NoError(t, err)
	return &bundle{pool: pool, schema: schema, effects: effects, inbox: in}
}

func (b *bundle) apply(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+b.effects+` (message_id, consumer) VALUES ($1, $2)`, msg.ID, b.inbox.Consumer())
	return err
}

func (b *bundle) count(t *testing.T, table, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table+` `+where, args...).Scan(&n))
	return n
}

func (b *bundle) inboxTable() string { return pgx.Identifier{b.schema, "inbox_messages"}.Sanitize() }

func msg(id string) inbox.Message {
	return inbox.Message{Source: "/outbox", ID: id, EventType: "order.created", Payload: []byte(`{"order_id":"` + id + `"}`),
		Headers: map[string]string{"correlationid": "req-1"}}
}

func TestHandleSameMessageFiveTimes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, inbox.Config{Consumer: "billing"})
	m := msg("17")
	for i := range 5 {
		res, err := b.inbox.Handle(ctx, b.pool, m, func(ctx context.Context, tx pgx.Tx) error { return b.apply(ctx, tx, m) })
		require.NoError(t, err)
		require.Equal(t, i > 0, res.Duplicate, "delivery %d", i+1)
	}
	require.Equal(t, 1, b.count(t, b.effects, ""))
	var (
		source, eventType, payload, corr string
		processed                        bool
	)
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT source, event_type, payload->>'order_id', headers->>'correlationid', processed_at IS NOT NULL FROM `+b.inboxTable()+
		` WHERE consumer = 'billing' AND message_id = '17'`).Scan(&source, &eventType, &payload, &corr, &processed))
	require.Equal(t, []any{"/outbox", "order.created", "17", "req-1", true}, []any{source, eventType, payload, corr, processed})
}

// Two consumer instances, each on connections of its own, get the same
// messages at the same time: every handler sleeps inside its transaction,
// so the second delivery's insert arrives while the first is uncommitted.
func TestHandleConcurrentDeliveriesApplyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, inbox.Config{Consumer: "billing"})
	pools := []*pgxpool.Pool{testutil.NewPool(t, "inbox-a"), testutil.NewPool(t, "inbox-b")}
	const messages, deliveries = 20, 4
	var (
		wg         sync.WaitGroup
		ran, dupes atomic.Int64
	)
	for i := range deliveries {
		pool := pools[i%2]
		wg.Go(func() {
			for n := range messages {
				m := msg(fmt.Sprint(n))
				res, err := b.inbox.Handle(ctx, pool, m, func(ctx context.Context, tx pgx.Tx) error {
					ran.Add(1)
					if _, err := tx.Exec(ctx, `SELECT pg_sleep(0.01)`); err != nil {
						return err
					}
					return b.apply(ctx, tx, m)
				})
				if err != nil {
					t.Errorf("deliver %s: %v", m.ID, err)
					return
				}
				if res.Duplicate {
					dupes.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(messages), ran.Load(), "each message's handler ran once")
	require.Equal(t, int64(messages*(deliveries-1)), dupes.Load())
	require.Equal(t, messages, b.count(t, b.effects, ""))
	require.Equal(t, messages, b.count(t, `(SELECT DISTINCT message_id FROM `+b.effects+`) e`, ""))
}

func TestHandlerErrorRollsBackAndRedeliveryAppliesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, inbox.Config{Consumer: "billing"})
	m := msg("5")
	boom := errors.New("payment service down")
	_, err := b.inbox.Handle(ctx, b.pool, m, func(ctx context.Context, tx pgx.Tx) error {
		if err := b.apply(ctx, tx, m); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	var he *inbox.HandlerError
	require.ErrorAs(t, err, &he)
	require.Equal(t, "5", he.ID)
	require.Zero(t, b.count(t, b.effects, ""), "the effect rolled back")
	require.Zero(t, b.count(t, b.inboxTable(), ""), "the record rolled back")

	for i := range 3 {
		res, err := b.inbox.Handle(ctx, b.pool, m, func(ctx context.Context, tx pgx.Tx) error { return b.apply(ctx, tx, m) })
		require.NoError(t, err)
		require.Equal(t, i > 0, res.Duplicate)
	}
	require.Equal(t, 1, b.count(t, b.effects, ""))
}

// Event IDs repeat across outboxes: the key is (consumer, source, id).
func TestKeyIsConsumerSourceAndID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, inbox.Config{Consumer: "billing"})
	audit, err := inbox.New(inbox.Config{Schema: b.schema, Consumer: "audit"})
	require.NoError(t, err)
	for _, c := range []struct {
		in     *inbox.Inbox
		source string
		dup    bool
	}{
		{b.inbox, "/outbox/eu", false},
		{b.inbox, "/outbox/us", false}, // the same ID from another outbox
		{b.inbox, "/outbox/eu", true},
		{audit, "/outbox/eu", false}, // another consumer gets it too
	} {
		m := msg("1")
		m.Source = c.source
		res, err := c.in.Handle(ctx, b.pool, m, func(context.Context, pgx.Tx) error { return nil })
		require.NoError(t, err)
		require.Equal(t, c.dup, res.Duplicate, "%s %s", c.in.Consumer(), c.source)
	}
	require.Equal(t, 3, b.count(t, b.inboxTable(), ""))
}

func TestHandleSQLOnPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, inbox.Config{Consumer: "billing"})
	db := stdlib.OpenDBFromPool(b.pool)
	t.Cleanup(func() { _ = db.Close() })
	m := msg("9")
	for i := range 3 {
		res, err := b.inbox.HandleSQL(ctx, db, m, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO `+b.effects+` (message_id, consumer) VALUES ($1, 'billing')`, m.ID)
			return err
		})
		require.NoError(t, err)
		require.Equal(t, i > 0, res.Duplicate)
	}
	require.Equal(t, 1, b.count(t, b.effects, ""))
}

// Store keeps messages unprocessed; an application takes them with the
// plain SQL docs/consumers.md shows, and Lag reports the backlog.
func TestStoreTakeWithSQLAndLag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, inbox.Config{Consumer: "mailer"})
	db := outbox.Postgres(b.pool)
	for _, id := range []string{"1", "2", "3", "2"} {
		_, err := b.inbox.Store(ctx, b.pool, msg(id))
		require.NoError(t, err)
	}
	lag, err := inbox.Lag(ctx, db, b.schema)
	require.NoError(t, err)
	require.Len(t, lag, 1)
	require.Equal(t, "mailer", lag[0].Consumer)
	require.Equal(t, int64(3), lag[0].Unprocessed)
	require.GreaterOrEqual(t, lag[0].OldestUnprocessedAge, time.Duration(0))

	// The documented recipe: take a batch, apply, mark processed, in one
	// transaction.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	rows, err := tx.Query(ctx, `SELECT message_id, payload->>'order_id' FROM `+b.inboxTable()+`
WHERE consumer = $1 AND processed_at IS NULL
ORDER BY received_at
LIMIT 2
FOR UPDATE SKIP LOCKED`, "mailer")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var id, order string
		err := r.Scan(&id, &order)
		return id, err
	})
	require.NoError(t, err)
	require.Len(t, ids, 2)
	_, err = tx.Exec(ctx, `UPDATE `+b.inboxTable()+` SET processed_at = now() WHERE consumer = $1 AND message_id = ANY($2)`, "mailer", ids)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	lag, err = inbox.Lag(ctx, db, b.schema)
	require.NoError(t, err)
	require.Equal(t, int64(1), lag[0].Unprocessed)
}

func TestPurgeKeepsUnprocessedAndRecent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, inbox.Config{Consumer: "billing"})
	for _, id := range []string{"old-1", "old-2", "old-3", "new"} {
		_, err := b.inbox.Record(ctx, b.pool, msg(id))
		require.NoError(t, err)
	}
	_, err := b.inbox.Store(ctx, b.pool, msg("waiting"))
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE `+b.inboxTable()+` SET processed_at = now() - interval '8 days', received_at = now() - interval '8 days' WHERE message_id LIKE 'old-%' OR message_id = 'waiting'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE `+b.inboxTable()+` SET processed_at = NULL WHERE message_id = 'waiting'`)
	require.NoError(t, err)

	n, err := inbox.Purge(ctx, outbox.Postgres(b.pool), inbox.PurgeConfig{Schema: b.schema, OlderThan: 7 * 24 * time.Hour, BatchSize: 2})
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	require.Equal(t, 2, b.count(t, b.inboxTable(), ""), "the recent and the unprocessed message stay")

	// Past the window a redelivery is no longer known: the trade-off.
	res, err := b.inbox.Record(ctx, b.pool, msg("old-1"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)

	_, err = inbox.Purge(ctx, outbox.Postgres(b.pool), inbox.PurgeConfig{Schema: b.schema})
	var ce *outbox.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "OlderThan", ce.Field)
}

func TestMessageAndConfigErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, inbox.Config{})
	require.Equal(t, inbox.ConsumerDefault, b.inbox.Consumer())
	for _, c := range []struct {
		m     inbox.Message
		field string
	}{
		{inbox.Message{}, "ID"},
		{inbox.Message{ID: "1", Payload: []byte("{nope")}, "Payload"},
		{inbox.Message{ID: string(make([]byte, 300))}, "ID"},
	} {
		_, err := b.inbox.Record(ctx, b.pool, c.m)
		var me *inbox.MessageError
		require.ErrorAs(t, err, &me)
		require.Equal(t, c.field, me.Field)
	}
	_, err := inbox.New(inbox.Config{Dialect: "oracle"})
	require.Error(t, err)
	sqlite, err := inbox.New(inbox.Config{Dialect: outbox.DialectSQLite})
	require.NoError(t, err)
	_, err = sqlite.Record(ctx, b.pool, msg("1"))
	require.ErrorContains(t, err, "RecordSQL")

	missing, err := inbox.New(inbox.Config{Schema: testutil.EmptySchemaName(t)})
	require.NoError(t, err)
	_, err = missing.Record(ctx, b.pool, msg("1"))
	require.ErrorIs(t, err, outbox.ErrNoTable)
	require.ErrorContains(t, err, "outbox migrate --inbox")
}

func TestMigrateInboxTrack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.Pool(t)
	db := outbox.Postgres(pool)
	cfg := outboxmigrate.Config{Schema: testutil.EmptySchemaName(t)}
	require.Equal(t, outboxmigrate.Migration{Version: 2, Name: "create_inbox_consumers"}, outboxmigrate.LatestInbox(db))
	v, err := outboxmigrate.InboxVersion(ctx, db, cfg)
	require.NoError(t, err)
	require.Zero(t, v)
	// Concurrent migrators apply it once.
	var (
		wg      sync.WaitGroup
		applied atomic.Int64
	)
	for range 3 {
		wg.Go(func() {
			res, err := outboxmigrate.MigrateInbox(ctx, db, cfg)
			if err != nil {
				t.Error(err)
				return
			}
			applied.Add(int64(len(res.Applied)))
		})
	}
	wg.Wait()
	require.Equal(t, int64(2), applied.Load(), "each of the two migrations once")
	// The outbox's own track is untouched: an inbox-only database.
	ov, err := outboxmigrate.Version(ctx, db, cfg)
	require.NoError(t, err)
	require.Zero(t, ov)
	require.Contains(t, outboxmigrate.InboxSQL(db, cfg), "inbox_messages")
	require.Contains(t, outboxmigrate.InboxSQL(db, cfg), "inbox_consumers")
}

func TestStoreBatchAllOrNone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, inbox.Config{Consumer: "mailer"})
	_, err := b.inbox.Store(ctx, b.pool, msg("1"))
	require.NoError(t, err)
	dups := func(results []inbox.Result) []bool {
		var out []bool
		for _, r := range results {
			out = append(out, r.Duplicate)
		}
		return out
	}

	results, err := b.inbox.StoreBatch(ctx, b.pool, []inbox.Message{msg("1"), msg("2"), msg("3"), msg("2")})
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, false, true}, dups(results), "stored before, new, new, earlier in the batch")
	require.Equal(t, 3, b.count(t, b.inboxTable(), `WHERE consumer = 'mailer'`))

	// A statement failing late in the batch stores none of it.
	_, err = b.pool.Exec(ctx, `ALTER TABLE `+b.inboxTable()+` ADD CONSTRAINT refuse_bad CHECK (message_id <> 'bad')`)
	require.NoError(t, err)
	_, err = b.inbox.StoreBatch(ctx, b.pool, []inbox.Message{msg("4"), msg("5"), msg("bad")})
	require.ErrorContains(t, err, "record message")
	require.Equal(t, 3, b.count(t, b.inboxTable(), `WHERE consumer = 'mailer'`), "nothing of the failed batch")

	// An invalid message refuses the batch before anything is sent.
	_, err = b.inbox.StoreBatch(ctx, b.pool, []inbox.Message{msg("6"), {Source: "/outbox"}})
	var me *inbox.MessageError
	require.ErrorAs(t, err, &me)
	_, err = b.inbox.StoreBatch(ctx, b.pool, nil)
	require.Error(t, err)

	// database/sql alike, in one transaction.
	sqlDB := stdlib.OpenDBFromPool(b.pool)
	t.Cleanup(func() { _ = sqlDB.Close() })
	results, err = b.inbox.StoreBatchSQL(ctx, sqlDB, []inbox.Message{msg("3"), msg("6"), msg("6")})
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, true}, dups(results))
	_, err = b.inbox.StoreBatchSQL(ctx, sqlDB, []inbox.Message{msg("7"), msg("bad")})
	require.Error(t, err)
	require.Equal(t, 4, b.count(t, b.inboxTable(), `WHERE consumer = 'mailer'`))
	require.Zero(t, b.count(t, b.inboxTable(), `WHERE message_id IN ('4', '5', '7', 'bad')`))
}
