package cli

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	// A driver may answer a cancellation with the connection it closed.
	badConn := fmt.Errorf("outboxmigrate: migration 002: %w", driver.ErrBadConn)
	require.Equal(t, "outboxmigrate: migration 002: driver: bad connection", errorMessage(badConn, false))
	require.Equal(t, "relay: already started", errorMessage(errors.New("outbox: relay: already started"), false),
		"the root package's prefix is the program's: printed once")
	require.Equal(t, "interrupted: outboxmigrate: migration 002: driver: bad connection", errorMessage(badConn, true))
	require.Equal(t, "interrupted: bench: context canceled", errorMessage(fmt.Errorf("bench: %w", context.Canceled), false))
	require.Equal(t, "stats: "+outbox.ErrNoTable.Error()+" (run outbox migrate)",
		errorMessage(fmt.Errorf("stats: %w", outbox.ErrNoTable), false))
}

func TestOneLineDropsRepeatedLines(t *testing.T) {
	t.Parallel()
	refused := "127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: connection refused"
	// pgx under sslmode=prefer: the same host's error for the TLS and the
	// plain attempt.
	require.Equal(t, "failed to connect to `user=bob database=db`: "+refused,
		oneLine("failed to connect to `user=bob database=db`:\n\t"+refused+"\n\t"+refused))
	require.Equal(t, "a: b; c", oneLine("a: b\n\nc\r\n"))
	require.Equal(t, "x: h1 down; h2 down", oneLine("x:\n h1 down\n h2 down\n h1 down"))
}
