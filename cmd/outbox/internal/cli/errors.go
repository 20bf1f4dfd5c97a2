package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/outboxkit/outbox"
)

// usageError is bad input from the operator: a flag value, an argument, a
// URL. It exits with ExitUsage.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// runError is an error from a command's own work. It exits with
// ExitFailure unless it wraps a usage or configuration error.
type runError struct{ err error }

func (e *runError) Error() string { return e.err.Error() }
func (e *runError) Unwrap() error { return e.err }

// exitCode maps an error from the root command to the process exit code.
func exitCode(err error) int {
	var (
		usage  *usageError
		config *outbox.ConfigError
		runErr *runError
		coded  *exitError
	)
	switch {
	case errors.As(err, &coded):
		return coded.code
	case errors.As(err, &usage), errors.As(err, &config):
		return ExitUsage
	case errors.As(err, &runErr):
		return ExitFailure
	default:
		// Only cobra's own errors (unknown flags, wrong argument counts,
		// missing required flags) reach here without a mark.
		return ExitUsage
	}
}

// errorMessage is what the operator reads for err. interrupted says the
// command's context was cancelled (by a signal): the error it caused need
// not wrap context.Canceled (a database driver may report the connection it
// closed on cancellation as bad).
//
// The root package's errors start with its name, "outbox: ", which is the
// program's own prefix too: it is printed once.
func errorMessage(err error, interrupted bool) string {
	msg := strings.TrimPrefix(err.Error(), "outbox: ")
	switch {
	case errors.Is(err, outbox.ErrNoTable) && !strings.Contains(msg, "outbox migrate"):
		msg += " (run outbox migrate)"
	case interrupted || errors.Is(err, context.Canceled):
		msg = "interrupted: " + msg
	}
	return msg
}

// oneLine joins a multi-line message (pgx puts the errors of several hosts
// on separate lines) into one line, each distinct line once: pgx repeats a
// host's error for each attempt (with and without TLS under
// sslmode=prefer).
func oneLine(s string) string {
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	var b strings.Builder
	seen := make(map[string]bool, len(lines))
	for _, l := range lines {
		if l == "" || seen[l] {
			continue
		}
		seen[l] = true
		if b.Len() > 0 {
			// "failed to connect to …:" introduces the lines after it.
			if strings.HasSuffix(b.String(), ":") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(l)
	}
	return b.String()
}
