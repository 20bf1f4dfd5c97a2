package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/sink/handlersink"
)

var _ handlersink.HandlerLedger = (*inbox.Ledger)(nil)

// Two named handlers of one event type behind a relay on PostgreSQL, with
// the inbox ledger: the notification fails once on one event and is
// retried, and the retry skips the audit, which succeeded. A broker
// consumer named like the notification handler that received the same
// event ID is not taken for the handler's success (another source).
func TestInboxLedgerRetrySkipsHandlerThatSucceeded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := testutil.Schema(t)
	_, err := outboxmigrate.MigrateInbox(ctx, outbox.Postgres(pool), outboxmigrate.Config{Schema: schema})
	require.NoError(t, err)
	ledger, err := inbox.NewLedger(pool, inbox.LedgerConfig{Schema: schema})
	require.NoError(t, err)

	var (
		mu   sync.Mutex
		runs = map[string]map[int64]int{"notify": {}, "audit": {}}
	)
	add := func(h string, id int64) int {
		mu.Lock()
		defer mu.Unlock()
		runs[h][id]++
		return runs[h][id]
	}
	sink := handlersink.New(handlersink.Config{Ledger: ledger})
	sink.HandleNamed("order.paid", "notify", func(_ context.Context, e outbox.Event) error {
		if add("notify", e.ID) == 1 && e.AggregateID == "flaky" {
			return errors.New("mail server down")
		}
		return nil
	})
	sink.HandleNamed("order.paid", "audit", func(_ context.Context, e outbox.Event) error {
		add("audit", e.ID)
		return nil
	})

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	res, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema}).Write(ctx, tx,
		outbox.Message{EventType: "order.paid", AggregateType: "order", AggregateID: "ok-1", Payload: map[string]int{}},
		outbox.Message{EventType: "order.paid", AggregateType: "order", AggregateID: "flaky", Payload: map[string]int{}},
		outbox.Message{EventType: "order.paid", AggregateType: "order", AggregateID: "ok-2", Payload: map[string]int{}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	flaky := res.IDs[1]

	// A broker consumer named "notify" already has the flaky event's ID
	// from another source: it must not count as the handler's success.
	broker, err := inbox.New(inbox.Config{Schema: schema, Consumer: "notify"})
	require.NoError(t, err)
	_, err = broker.Store(ctx, pool, inbox.Message{Source: "/outbox", ID: fmt.Sprint(flaky)})
	require.NoError(t, err)

	db := outbox.Postgres(pool)
	relay, err := outbox.NewRelay(db, outbox.RelayConfig{Schema: schema, Sink: sink, PollInterval: 10 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, HeartbeatInterval: -1,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, relay.Start(ctx))
	mgr := outbox.NewManager(db, outbox.ManagerConfig{Schema: schema})
	testutil.WaitFor(t, 20*time.Second, "every event to be processed", func() bool {
		s, err := mgr.Stats(ctx)
		require.NoError(t, err)
		return s.Processed == 3
	})
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, relay.Stop(stopCtx))

	e, err := mgr.Event(ctx, flaky)
	require.NoError(t, err)
	require.Equal(t, 1, e.Attempts, "the flaky event failed once, then was delivered")
	mu.Lock()
	require.Equal(t, map[int64]int{res.IDs[0]: 1, flaky: 2, res.IDs[2]: 1}, runs["notify"])
	require.Equal(t, map[int64]int{res.IDs[0]: 1, flaky: 1, res.IDs[2]: 1}, runs["audit"], "the retry skipped the audit")
	mu.Unlock()

	// The ledger's rows: both handlers of each event, processed, under the
	// ledger's source.
	rows, err := pool.Query(ctx, `SELECT consumer || ' ' || message_id FROM `+pgx.Identifier{schema, "inbox_messages"}.Sanitize()+
		` WHERE source = $1 AND processed_at IS NOT NULL ORDER BY 1`, inbox.LedgerSourceDefault)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, got, 6, strings.Join(got, "\n"))

	// Succeeded with keys nobody recorded, and a repeated record.
	require.NoError(t, ledger.RecordSuccess(ctx, fmt.Sprint(flaky), "audit"))
	m, err := ledger.Succeeded(ctx, []string{fmt.Sprint(flaky), "nope"})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"audit", "notify"}, m[fmt.Sprint(flaky)])
	require.NotContains(t, m, "nope")
}

func TestInboxLedgerErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := inbox.NewLedger(nil, inbox.LedgerConfig{})
	var ce *outbox.ConfigError
	require.ErrorAs(t, err, &ce)

	pool, schema := testutil.Schema(t) // no inbox_messages
	ledger, err := inbox.NewLedger(pool, inbox.LedgerConfig{Schema: schema})
	require.NoError(t, err)
	_, err = ledger.Succeeded(ctx, []string{"1"})
	require.ErrorIs(t, err, inbox.ErrNoTable)
	require.ErrorContains(t, err, "outbox migrate --inbox")
	err = ledger.RecordSuccess(ctx, "1", "audit")
	require.ErrorIs(t, err, inbox.ErrNoTable)
	require.ErrorContains(t, err, "outbox migrate --inbox")
	require.Error(t, ledger.RecordSuccess(ctx, strings.Repeat("9", inbox.MaxMessageIDLen+1), "audit"))
	require.Error(t, ledger.RecordSuccess(ctx, "1", strings.Repeat("h", inbox.MaxConsumerLen+1)))
}
