package outbox

import (
	"errors"
	"strings"
	"time"
	"unicode/utf8"
)

// Upper bounds on values that size memory, loops or stored columns. A value
// past one is refused with an error naming it, rather than allocated,
// overflowed or truncated.
const (
	// ListLimitMax bounds ListParams.Limit: a listing is held in memory
	// whole. Page with BeforeID for more.
	ListLimitMax = 10_000
	// MaxAttemptsLimit bounds Message.MaxAttempts and the max attempts the
	// Manager sets: the column is a 32-bit integer, and an event retried a
	// million times is better dead-lettered.
	MaxAttemptsLimit = 1_000_000
	// BackoffMaxLimit bounds RelayConfig.BackoffMax: a retry more than 30
	// days away is a dead letter in all but name.
	BackoffMaxLimit = 30 * 24 * time.Hour
	// WorkersMax bounds RelayConfig.Workers: each is a goroutine holding a
	// batch, and a database connection while it claims or marks.
	WorkersMax = 1000
	// MaxInFlightMax bounds RelayConfig.MaxInFlight: each batch in flight
	// is a goroutine holding its events.
	MaxInFlightMax = 1000
)

// ErrPayloadTooLarge is wrapped by the *MessageError of a message whose
// encoded payload is larger than WriterConfig.MaxPayloadBytes.
var ErrPayloadTooLarge = errors.New("payload too large")

// checkText refuses a message text field the database would refuse (a NUL
// byte, invalid UTF-8) or that no sink could route (blank when required).
func checkText(s string, required bool) error {
	switch {
	case required && strings.TrimSpace(s) == "":
		return errors.New("is empty or blank: every event needs a type, such as order.created")
	case strings.IndexByte(s, 0) >= 0:
		return errors.New("holds a NUL byte, which the database cannot store: remove it")
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8: pass text")
	}
	return nil
}

// checkMessageText checks the text fields of message i.
func checkMessageText(i int, m *Message) error {
	for _, f := range []struct {
		name     string
		value    string
		required bool
	}{
		{"EventType", m.EventType, true}, {"AggregateType", m.AggregateType, false},
		{"AggregateID", m.AggregateID, false}, {"IdempotencyKey", m.IdempotencyKey, false},
	} {
		if err := checkText(f.value, f.required); err != nil {
			return &MessageError{Index: i, Field: f.name, Err: err}
		}
	}
	return nil
}

// checkFilterText refuses filter values the database cannot compare with
// (a NUL byte, invalid UTF-8): they would fail the query with a database
// error instead of matching nothing. Fields are named as the admin API's
// query parameters.
func checkFilterText(eventType, aggregateType, aggregateID, idempotencyKey string) error {
	for _, f := range []struct{ name, value string }{
		{"type", eventType}, {"aggregate_type", aggregateType},
		{"aggregate_id", aggregateID}, {"idempotency_key", idempotencyKey},
	} {
		if err := checkText(f.value, false); err != nil {
			return &ConfigError{Field: f.name, Err: err}
		}
	}
	return nil
}
