package drivertest_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/outboxtest"
)

// SQLite keeps one outbox per file: tenant discovery refuses it with
// ErrTenantsUnsupported, in one line that says what to run instead.
func TestTenantsRefuseSQLite(t *testing.T) {
	t.Parallel()
	db := outbox.SQLite(drivertest.OpenSQLiteFile(t, filepath.Join(t.TempDir(), "outbox.db")))
	_, err := outbox.NewTenants(db, outbox.TenantsConfig{Relay: outbox.RelayConfig{Sink: outboxtest.NewRecorder()}, Schemas: "s_*"})
	require.ErrorIs(t, err, outbox.ErrTenantsUnsupported)
	require.ErrorContains(t, err, "run one relay per file")
	_, err = outbox.DiscoverTenants(t.Context(), db, "s_*", "")
	require.ErrorIs(t, err, outbox.ErrTenantsUnsupported)
}
