package outbox_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
)

func TestWriteRefusesUnstorableText(t *testing.T) {
	t.Parallel()
	b := setupWrite(t)
	cases := []struct {
		name  string
		msg   outbox.Message
		field string
		want  string
	}{
		{"blank type", outbox.Message{EventType: "  \t", Payload: 1}, "EventType", "blank"},
		{"NUL in type", outbox.Message{EventType: "order\x00created", Payload: 1}, "EventType", "NUL"},
		{"invalid UTF-8 type", outbox.Message{EventType: "order\xff", Payload: 1}, "EventType", "UTF-8"},
		{"NUL in aggregate ID", outbox.Message{EventType: "x", AggregateID: "a\x00", Payload: 1}, "AggregateID", "NUL"},
		{"NUL in aggregate type", outbox.Message{EventType: "x", AggregateType: "\x00", Payload: 1}, "AggregateType", "NUL"},
		{"NUL in idempotency key", outbox.Message{EventType: "x", IdempotencyKey: "k\x00", Payload: 1}, "IdempotencyKey", "NUL"},
		{"max attempts past 32 bits", outbox.Message{EventType: "x", Payload: 1, MaxAttempts: 1<<32 + 3}, "MaxAttempts", "use 1 to 1000000"},
		{"max attempts past the limit", outbox.Message{EventType: "x", Payload: 1, MaxAttempts: outbox.MaxAttemptsLimit + 1}, "MaxAttempts", "use 1 to 1000000"},
	}
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	for _, c := range cases {
		_, err := b.writer.Write(b.ctx, tx, outbox.Message{EventType: "ok", Payload: 1}, c.msg)
		var me *outbox.MessageError
		require.ErrorAs(t, err, &me, c.name)
		require.Equal(t, 1, me.Index, c.name)
		require.Equal(t, c.field, me.Field, c.name)
		require.Contains(t, err.Error(), c.want, c.name)
	}
	// Nothing reached the database, so the transaction still works, and
	// the largest max attempts is stored as it is.
	res, err := b.writer.Write(b.ctx, tx, outbox.Message{EventType: "ok", Payload: 1, MaxAttempts: outbox.MaxAttemptsLimit})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	e, err := b.mgr.Event(b.ctx, res.IDs[0])
	require.NoError(t, err)
	require.Equal(t, outbox.MaxAttemptsLimit, e.MaxAttempts)
}

func TestWriteMaxPayloadBytes(t *testing.T) {
	t.Parallel()
	b := setupWrite(t)
	w := outbox.NewWriter(outbox.WriterConfig{Schema: b.schema, MaxPayloadBytes: 16})
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()

	_, err = w.Write(b.ctx, tx, outbox.Message{EventType: "x", Payload: map[string]string{"data": strings.Repeat("a", 100)}})
	require.ErrorIs(t, err, outbox.ErrPayloadTooLarge)
	var me *outbox.MessageError
	require.ErrorAs(t, err, &me)
	require.Equal(t, "Payload", me.Field)
	require.Contains(t, err.Error(), "more than MaxPayloadBytes (16)")

	res, err := w.Write(b.ctx, tx, outbox.Message{EventType: "x", Payload: []byte(`{"a":1}`)})
	require.NoError(t, err)
	require.NotZero(t, res.IDs[0])
}

func TestListEventsLimitIsBounded(t *testing.T) {
	t.Parallel()
	b := setupWrite(t)
	// A limit past the cap once made the driver allocate it up front
	// (makeslice panics, or memory runs out); it is refused.
	for _, limit := range []int{outbox.ListLimitMax + 1, math.MaxInt} {
		_, err := b.mgr.ListEvents(b.ctx, outbox.ListParams{Limit: limit})
		var ce *outbox.ConfigError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "limit", ce.Field)
	}
	_, err := b.mgr.SearchEvents(b.ctx, outbox.SearchParams{Limit: math.MaxInt})
	require.Error(t, err)
	events, err := b.mgr.ListEvents(b.ctx, outbox.ListParams{Limit: outbox.ListLimitMax})
	require.NoError(t, err)
	require.Empty(t, events)
}

func TestRelayConfigBounds(t *testing.T) {
	t.Parallel()
	sink := outboxtest.NewRecorder()
	for _, c := range []struct {
		cfg   outbox.RelayConfig
		field string
	}{
		{outbox.RelayConfig{Sink: sink, BackoffMax: time.Duration(math.MaxInt64)}, "BackoffMax"},
		{outbox.RelayConfig{Sink: sink, BackoffMax: outbox.BackoffMaxLimit + time.Second}, "BackoffMax"},
		{outbox.RelayConfig{Sink: sink, MaxAttempts: outbox.MaxAttemptsLimit + 1}, "MaxAttempts"},
		{outbox.RelayConfig{Sink: sink, Workers: 1 << 40}, "Workers"},
	} {
		err := c.cfg.WithDefaults().Validate()
		var ce *outbox.ConfigError
		require.True(t, errors.As(err, &ce), "%v", err)
		require.Equal(t, c.field, ce.Field, err.Error())
	}
	require.NoError(t, outbox.RelayConfig{Sink: sink, BackoffMax: outbox.BackoffMaxLimit}.WithDefaults().Validate())
}

func TestFiltersRefuseUnstorableText(t *testing.T) {
	t.Parallel()
	b := setupWrite(t)
	// Once a database error (a 500 on the admin API, a stack of driver
	// text on the CLI); now a ConfigError naming the filter.
	for field, f := range map[string]outbox.EventFilter{
		"type": {EventType: "a\x00"}, "aggregate_type": {AggregateType: "\xff"},
		"aggregate_id": {AggregateID: "\x00"}, "idempotency_key": {IdempotencyKey: "k\xc3\x28"},
	} {
		var ce *outbox.ConfigError
		_, err := b.mgr.SearchEvents(b.ctx, outbox.SearchParams{EventFilter: f})
		require.ErrorAs(t, err, &ce, field)
		require.Equal(t, field, ce.Field)
		_, err = b.mgr.CountEvents(b.ctx, f)
		require.ErrorAs(t, err, &ce, field)
		_, err = b.mgr.ReplayMatching(b.ctx, f, nil)
		require.ErrorAs(t, err, &ce, field)
	}
	_, err := b.mgr.ListEvents(b.ctx, outbox.ListParams{EventType: "order\x00"})
	var ce *outbox.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "type", ce.Field)
}
