package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
)

type writeBundle struct {
	ctx  context.Context
	pool interface {
		Begin(context.Context) (pgx.Tx, error)
	}
	db     outbox.Database
	mgr    *outbox.Manager
	writer *outbox.Writer
	schema string
}

func setupWrite(t *testing.T) writeBundle {
	t.Helper()
	pool, schema := testutil.Schema(t)
	db := outbox.Postgres(pool)
	return writeBundle{
		ctx: context.Background(), pool: pool, db: db, schema: schema,
		mgr:    outbox.NewManager(db, outbox.ManagerConfig{Schema: schema}),
		writer: outbox.NewWriter(outbox.WriterConfig{Schema: schema}),
	}
}

func TestWriteBatchReturnsIDsInOrder(t *testing.T) {
	t.Parallel()
	b := setupWrite(t)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()

	res, err := b.writer.Write(b.ctx, tx,
		outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: "1", Payload: map[string]int{"n": 1}},
		outbox.Message{EventType: "order.paid", AggregateType: "order", AggregateID: "1", Payload: json.RawMessage(`{"n":2}`),
			CorrelationID: "corr", CausationID: "cause", SchemaVersion: "2", Headers: map[string]string{"tenant": "acme"}},
		outbox.Message{EventType: "order.shipped", Payload: []byte(`[1,2,3]`), MaxAttempts: 9, Delay: time.Hour},
	)
	require.NoError(t, err)
	require.Len(t, res.IDs, 3)
	require.Empty(t, res.Duplicates)
	require.NoError(t, tx.Commit(b.ctx))

	e0, err := b.mgr.Event(b.ctx, res.IDs[0])
	require.NoError(t, err)
	require.Equal(t, "order.created", e0.EventType)
	require.JSONEq(t, `{"n":1}`, string(e0.Payload))
	require.Equal(t, outbox.StatusPending, e0.Status)

	e1, err := b.mgr.Event(b.ctx, res.IDs[1])
	require.NoError(t, err)
	require.Equal(t, "order.paid", e1.EventType)
	require.Equal(t, map[string]string{"correlation_id": "corr", "causation_id": "cause", "schema_version": "2", "tenant": "acme"}, e1.Headers)

	e2, err := b.mgr.Event(b.ctx, res.IDs[2])
	require.NoError(t, err)
	require.Equal(t, "order.shipped", e2.EventType)
	require.Equal(t, 9, e2.MaxAttempts)
	require.Empty(t, e2.AggregateID)
	require.InDelta(t, time.Hour.Seconds(), e2.AvailableAt.Sub(e2.CreatedAt).Seconds(), 1)
}

func TestWriteDuplicateKeyKeepsTransactionUsable(t *testing.T) {
	t.Parallel()
	b := setupWrite(t)
	key := outbox.IdempotencyKey("invoice", "456", "created", time.Date(2026, 4, 24, 23, 30, 0, 0, time.FixedZone("x", -3600)))
	require.Equal(t, "invoice:456:created:2026-04-25", key)

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	first, err := b.writer.Write(b.ctx, tx, outbox.Message{EventType: "created", Payload: 1, IdempotencyKey: key})
	require.NoError(t, err)
	require.NotZero(t, first.IDs[0])
	require.NoError(t, tx.Commit(b.ctx))

	tx, err = b.pool.Begin(b.ctx)
	require.NoError(t, err)
	res, err := b.writer.Write(b.ctx, tx,
		outbox.Message{EventType: "created", Payload: 2, IdempotencyKey: key},
		outbox.Message{EventType: "other", Payload: 3, IdempotencyKey: "k2"},
		outbox.Message{EventType: "other", Payload: 4, IdempotencyKey: "k2"},
	)
	require.NoError(t, err)
	require.Equal(t, []int{0, 2}, res.Duplicates)
	require.Zero(t, res.IDs[0])
	require.NotZero(t, res.IDs[1])
	require.Zero(t, res.IDs[2])
	// The transaction is still usable after the skipped duplicates.
	var one int
	require.NoError(t, tx.QueryRow(b.ctx, "SELECT 1").Scan(&one))
	require.NoError(t, tx.Commit(b.ctx))

	s, err := b.mgr.Stats(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, s.Pending)
}

func TestWriteRollbackStoresNothing(t *testing.T) {
	t.Parallel()
	b := setupWrite(t)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = b.writer.Write(b.ctx, tx, outbox.Message{EventType: "ghost", Payload: 1})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.ctx))
	s, err := b.mgr.Stats(b.ctx)
	require.NoError(t, err)
	require.Zero(t, s.Pending)
}

func TestWriteSQLTx(t *testing.T) {
	t.Parallel()
	b := setupWrite(t)
	sqldb, err := sql.Open("pgx", testutil.DatabaseURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = sqldb.Close() })
	_ = stdlib.GetDefaultDriver()

	tx, err := sqldb.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	res, err := b.writer.WriteSQL(b.ctx, tx,
		outbox.Message{EventType: "a", Payload: map[string]string{"x": "y"}, IdempotencyKey: "same"},
		outbox.Message{EventType: "b", Payload: nil, IdempotencyKey: "same"},
	)
	require.NoError(t, err)
	require.NotZero(t, res.IDs[0])
	require.Equal(t, []int{1}, res.Duplicates)
	require.NoError(t, tx.Commit())

	e, err := b.mgr.Event(b.ctx, res.IDs[0])
	require.NoError(t, err)
	require.JSONEq(t, `{"x":"y"}`, string(e.Payload))
}

func TestWriteRefusesBadMessages(t *testing.T) {
	t.Parallel()
	b := setupWrite(t)
	cases := []struct {
		name  string
		msg   outbox.Message
		field string
	}{
		{"no type", outbox.Message{Payload: 1}, "EventType"},
		{"invalid json", outbox.Message{EventType: "x", Payload: []byte("{nope")}, "Payload"},
		{"unmarshalable", outbox.Message{EventType: "x", Payload: make(chan int)}, "Payload"},
		{"negative attempts", outbox.Message{EventType: "x", Payload: 1, MaxAttempts: -1}, "MaxAttempts"},
		{"empty header name", outbox.Message{EventType: "x", Payload: 1, Headers: map[string]string{"": "v"}}, "Headers"},
	}
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	for _, c := range cases {
		_, err := b.writer.Write(b.ctx, tx, outbox.Message{EventType: "ok", Payload: 1}, c.msg)
		var me *outbox.MessageError
		require.True(t, errors.As(err, &me), "%s: %v", c.name, err)
		require.Equal(t, 1, me.Index, c.name)
		require.Equal(t, c.field, me.Field, c.name)
	}
	// Nothing reached the database, so the transaction still works.
	res, err := b.writer.Write(b.ctx, tx, outbox.Message{EventType: "ok", Payload: 1})
	require.NoError(t, err)
	require.NotZero(t, res.IDs[0])
}

func TestWriteMissingTable(t *testing.T) {
	t.Parallel()
	pool := testutil.Pool(t)
	w := outbox.NewWriter(outbox.WriterConfig{Schema: testutil.EmptySchemaName(t)})
	tx, err := pool.Begin(context.Background())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = w.Write(context.Background(), tx, outbox.Message{EventType: "x", Payload: 1})
	require.ErrorIs(t, err, outbox.ErrNoTable)
	require.Contains(t, err.Error(), "run outbox migrate")
}

type traceKey struct{}

func TestWriteHeadersFromContext(t *testing.T) {
	t.Parallel()
	b := setupWrite(t)
	w := outbox.NewWriter(outbox.WriterConfig{Schema: b.schema, HeadersFromContext: func(ctx context.Context) map[string]string {
		tp, _ := ctx.Value(traceKey{}).(string)
		return map[string]string{outbox.HeaderTraceParent: tp, "empty": ""}
	}})
	ctx := context.WithValue(b.ctx, traceKey{}, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	res, err := w.Write(ctx, tx,
		outbox.Message{EventType: "a", Payload: 1},
		outbox.Message{EventType: "b", Payload: 2, Headers: map[string]string{outbox.HeaderTraceParent: "mine"}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	a, err := b.mgr.Event(ctx, res.IDs[0])
	require.NoError(t, err)
	require.Equal(t, map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, a.Headers)
	own, err := b.mgr.Event(ctx, res.IDs[1])
	require.NoError(t, err)
	require.Equal(t, "mine", own.Headers[outbox.HeaderTraceParent], "a message's own header wins")
}
