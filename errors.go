package outbox

import (
	"errors"
	"fmt"
	"strings"

	"github.com/outboxkit/outbox/internal/driver"
)

// ErrNotFound is returned when an event does not exist.
var ErrNotFound = driver.ErrNotFound

// ErrNoTable is returned when the outbox table is missing from the schema:
// run `outbox migrate` or outboxmigrate.Migrate.
var ErrNoTable = driver.ErrNoTable

// ErrReadOnly is returned, wrapping the database's own error, when the
// database refuses a write because it is read-only (a demoted primary or a
// standby after a failover, default_transaction_read_only, MySQL's
// read_only). The relay waits and retries without spending attempts.
var ErrReadOnly = driver.ErrReadOnly

// ErrPooler is returned by Relay.Start when the database is reached through
// a connection pooler (PgBouncer) and the relay is not in PgBouncer mode
// (RelayConfig.PgBouncer), or is but its pool keeps session state.
var ErrPooler = driver.ErrPooler

// ConfigError is an invalid configuration value or argument.
type ConfigError struct {
	Field string // the field, flag or argument that is wrong
	Err   error
}

// Error returns "invalid <Field>: <Err>".
func (e *ConfigError) Error() string { return "invalid " + e.Field + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *ConfigError) Unwrap() error { return e.Err }

// MessageError is a message the writer refused before touching the database;
// the caller's transaction stays usable.
type MessageError struct {
	Index int    // position of the message in the call
	Field string // the Message field at fault
	Err   error
}

// Error returns "outbox message <Index>: <Field>: <Err>".
func (e *MessageError) Error() string {
	return fmt.Sprintf("outbox message %d: %s: %v", e.Index, e.Field, e.Err)
}

// Unwrap returns the underlying error.
func (e *MessageError) Unwrap() error { return e.Err }

// permanentError marks a sink error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as one that retrying will not fix (a malformed event,
// an HTTP 400): the relay dead-letters the event at once instead of retrying.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked with
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

func errUnknownStatus(s string) error {
	return fmt.Errorf("unknown status %q: use one of %s", s,
		strings.Join([]string{driver.StatusPending, driver.StatusProcessing, driver.StatusProcessed, driver.StatusFailed}, ", "))
}

// unavailableError marks a sink error that says the sink cannot be reached
// at all, whatever the event.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// Unavailable marks err as a connection-level failure that every event
// would meet: the connection was refused or reset before the sink answered,
// the host name does not resolve, the TLS handshake failed, the broker has
// no responders or its connection is closed. The relay spends no attempt on
// such a failure: it releases the batch, opens the sink's circuit and
// probes the sink until it answers again (RelayConfig.ProbeInterval). A
// failure specific to one event (an HTTP status for it, a broker's
// rejection, a timeout while other events pass) must not be marked: it
// spends an attempt as usual. Unavailable(nil) is nil.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err: err}
}

// IsUnavailable reports whether err, or an error it wraps, was marked with
// Unavailable.
func IsUnavailable(err error) bool {
	var u *unavailableError
	return errors.As(err, &u)
}
