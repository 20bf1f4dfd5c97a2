package cli

import (
	"context"
	"database/sql/driver"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	// A driver may answer a cancellation with the connection it closed.
	badConn := fmt.Errorf("outbox migrate: migration 002: %w", driver.ErrBadConn)
	require.Equal(t, "outbox migrate: migration 002: driver: bad connection", errorMessage(badConn, false))
	require.Equal(t, "interrupted: outbox migrate: migration 002: driver: bad connection", errorMessage(badConn, true))
	require.Equal(t, "interrupted: bench: context canceled", errorMessage(fmt.Errorf("bench: %w", context.Canceled), false))
	require.Equal(t, "stats: "+outbox.ErrNoTable.Error()+" (run outbox migrate)",
		errorMessage(fmt.Errorf("stats: %w", outbox.ErrNoTable), false))
}
