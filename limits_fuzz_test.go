package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
)

// refusingTx is a transaction the writer must not reach with a message it
// should have refused: it records the call and fails it.
type refusingTx struct{ called bool }

var errNoDatabase = errors.New("no database in this test")

func (tx *refusingTx) Query(context.Context, string, ...any) (pgx.Rows, error) {
	tx.called = true
	return nil, errNoDatabase
}

func storableText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// FuzzWriterText checks the writer's checks of a message's text fields
// without a database: unstorable or blank text is refused as a
// *MessageError before the transaction is touched; other text reaches it.
func FuzzWriterText(f *testing.F) {
	for _, seed := range []struct{ typ, aggType, aggID, key string }{
		{"order.created", "order", "A-1", "k"}, {"", "", "", ""}, {" ", "", "", ""}, {"a\x00", "", "", ""},
		{"ok", "\xff", "", ""}, {"ok", "", "id\x00", ""}, {"ok", "", "", "\xc3\x28"}, {"é\u009b", "x", "y", "z"},
	} {
		f.Add(seed.typ, seed.aggType, seed.aggID, seed.key, 3)
	}
	w := outbox.NewWriter(outbox.WriterConfig{})
	f.Fuzz(func(t *testing.T, typ, aggType, aggID, key string, maxAttempts int) {
		tx := &refusingTx{}
		_, err := w.Write(context.Background(), tx, outbox.Message{EventType: typ, AggregateType: aggType, AggregateID: aggID,
			IdempotencyKey: key, MaxAttempts: maxAttempts, Payload: 1})
		valid := strings.TrimSpace(typ) != "" && storableText(typ) && storableText(aggType) && storableText(aggID) && storableText(key) &&
			maxAttempts >= 0 && maxAttempts <= outbox.MaxAttemptsLimit
		var me *outbox.MessageError
		switch {
		case valid && !errors.Is(err, errNoDatabase):
			t.Fatalf("a valid message was refused: %v", err)
		case !valid && (!errors.As(err, &me) || tx.called):
			t.Fatalf("an invalid message (%q, %q, %q, %q, %d) was not refused before the database: %v", typ, aggType, aggID, key, maxAttempts, err)
		}
	})
}

// FuzzRelayEventTypes checks RelayConfig's event-type patterns: a pattern
// the database cannot compare with is refused by Validate, naming
// EventTypes.
func FuzzRelayEventTypes(f *testing.F) {
	for _, seed := range []string{"order.*", "*", "", "a\x00", "\xff", "100%_\\", "é*"} {
		f.Add(seed)
	}
	sink := outboxtest.NewRecorder()
	f.Fuzz(func(t *testing.T, pattern string) {
		err := outbox.RelayConfig{Sink: sink, EventTypes: []string{pattern}}.WithDefaults().Validate()
		valid := pattern != "" && storableText(pattern)
		var ce *outbox.ConfigError
		switch {
		case valid && err != nil:
			t.Fatalf("pattern %q refused: %v", pattern, err)
		case !valid && (!errors.As(err, &ce) || ce.Field != "EventTypes"):
			t.Fatalf("pattern %q: %v, want a ConfigError for EventTypes", pattern, err)
		}
	})
}
