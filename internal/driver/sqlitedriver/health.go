package sqlitedriver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/outboxkit/outbox/internal/driver"
	"github.com/outboxkit/outbox/internal/driver/sqldriver"
)

// TableHealth reads the database file's pages from its header (page_count,
// freelist_count: the free pages that deleted rows left, which SQLite
// reuses but never returns without VACUUM) and the size of the WAL file.
// SQLite keeps no per-table sizes or row estimates short of reading every
// page (dbstat, count(*)), and cannot see other connections' transactions,
// so the tables' figures and the horizon are unknown.
func (d Dialect) TableHealth(ctx context.Context, q sqldriver.Querier, schema string) (driver.TableHealth, error) {
	var h driver.TableHealth
	s := quote(schemaName(schema))
	rows, err := q.QueryContext(ctx, `SELECT name FROM `+s+`.sqlite_master
WHERE type = 'table' AND name IN ('outbox_events', 'outbox_events_archive')
ORDER BY name`)
	if err != nil {
		return h, err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var t driver.TableStorage
		if err := rows.Scan(&t.Table); err != nil {
			return h, err
		}
		h.Tables = append(h.Tables, t)
	}
	if err := rows.Err(); err != nil {
		return h, err
	}
	if len(h.Tables) == 0 || h.Tables[0].Table != driver.TableEvents {
		return h, fmt.Errorf("%w: %s", driver.ErrNoTable, d.Table(schema, driver.TableEvents))
	}

	var pages, pageSize, free int64
	for _, p := range []struct {
		pragma string
		dest   *int64
	}{{"page_count", &pages}, {"page_size", &pageSize}, {"freelist_count", &free}} {
		if err := q.QueryRowContext(ctx, `PRAGMA `+s+`.`+p.pragma).Scan(p.dest); err != nil {
			return h, fmt.Errorf("pragma %s: %w", p.pragma, err)
		}
	}
	h.File = &driver.DatabaseFile{Bytes: pages * pageSize, FreeBytes: free * pageSize}
	h.File.WALBytes, err = walBytes(ctx, q, schema)
	return h, err
}

// walBytes is the size of the schema's -wal file: it grows while a reader
// keeps checkpoints from reaching its end. nil outside WAL mode and for
// in-memory and temporary databases, which have no file.
func walBytes(ctx context.Context, q sqldriver.Querier, schema string) (*int64, error) {
	var mode string
	if err := q.QueryRowContext(ctx, `PRAGMA `+quote(schemaName(schema))+`.journal_mode`).Scan(&mode); err != nil {
		return nil, fmt.Errorf("pragma journal_mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return nil, nil
	}
	var file string
	if err := q.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = ?`, schemaName(schema)).Scan(&file); err != nil {
		return nil, fmt.Errorf("pragma database_list: %w", err)
	}
	if file == "" {
		return nil, nil
	}
	var n int64
	switch st, err := os.Stat(file + "-wal"); {
	case err == nil:
		n = st.Size()
	case !errors.Is(err, fs.ErrNotExist): // absent between the last close and the next open
		return nil, fmt.Errorf("size of the WAL file: %w", err)
	}
	return &n, nil
}
