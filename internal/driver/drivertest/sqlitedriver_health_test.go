package drivertest_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/internal/driver/sqlitedriver"
)

func TestTableHealthFreePagesAndWAL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := drivertest.OpenSQLiteFile(t, filepath.Join(t.TempDir(), "outbox.db"))
	drv := sqlitedriver.New(db, "")
	_, err := drv.Migrate(ctx)
	require.NoError(t, err)

	h, err := drv.TableHealth(ctx)
	require.NoError(t, err)
	require.Equal(t, []driver.TableStorage{{Table: driver.TableEvents}, {Table: driver.TableArchive}}, h.Tables,
		"SQLite has no per-table figures short of reading every page")
	require.Nil(t, h.Horizon)
	require.Nil(t, h.HistoryLength)
	require.NotNil(t, h.File)
	require.Zero(t, h.File.FreeBytes)
	before := h.File.Bytes

	// 200 events of 4 KiB each fill pages that the delete then frees.
	_, err = db.ExecContext(ctx, `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 200)
INSERT INTO "outbox_events" ("event_type", "payload") SELECT 'e', json_object('pad', printf('%.4096c', 'x')) FROM g`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `DELETE FROM "outbox_events"`)
	require.NoError(t, err)

	h, err = drv.TableHealth(ctx)
	require.NoError(t, err)
	require.Greater(t, h.File.Bytes, before+200*4096)
	require.Greater(t, h.File.FreeBytes, int64(200*4096), "the deleted rows' pages")
	require.LessOrEqual(t, h.File.FreeBytes, h.File.Bytes)
	require.NotNil(t, h.File.WALBytes)
	require.Positive(t, *h.File.WALBytes, "the file is in WAL mode and was written")
}

func TestTableHealthOutsideWALMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "outbox.db")+"?_pragma=journal_mode(DELETE)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	drv := sqlitedriver.New(db, "")
	_, err = drv.TableHealth(ctx)
	require.ErrorIs(t, err, driver.ErrNoTable)
	_, err = drv.Migrate(ctx)
	require.NoError(t, err)
	h, err := drv.TableHealth(ctx)
	require.NoError(t, err)
	require.Positive(t, h.File.Bytes)
	require.Nil(t, h.File.WALBytes)
}
