package pgdriver

import (
	"context"
	"strings"

	"github.com/outboxkit/outbox/internal/driver"
)

// archiveTable is the quoted archive table beside the outbox table t.
func archiveTable(t string) string { return strings.TrimSuffix(t, `"`) + `_archive"` }

// replayBranches returns the two halves of a replay read, the table's
// processed rows and the archive's rows, with the filter's parameters
// bound once and shared by both: cols is the select list (for the
// archive, lease_expiries, which it lacks, reads as 0).
func (d *Driver) replayBranches(p driver.ReplayParams, cols func(archive bool) string) (table, archive string, f *filterSQL, err error) {
	flt := p.Filter
	flt.Status, flt.MinAttempts = "", 0
	if f, err = buildFilter(flt); err != nil {
		return "", "", nil, err
	}
	f.add("id > ?", p.AfterID)
	if p.UpToID > 0 {
		f.add("id <= ?", p.UpToID)
	}
	where := f.clause()
	// The status is a literal, as everywhere in the admin statements; no
	// partial index serves processed rows, so the read walks the primary
	// key from AfterID up (the archive's primary key, or each partition's
	// (id, processed_at) key, likewise) and stops once it has its rows.
	table = `SELECT ` + cols(false) + ` FROM ` + d.table + where + ` AND status = 'processed'`
	archive = `SELECT ` + cols(true) + ` FROM ` + archiveTable(d.table) + where
	return table, archive, f, nil
}

// ReplayBatch reads one keyset batch of delivered events from the table and
// the archive in one statement: one snapshot, so an event a relay moves to
// the archive between two batches is read once, from one side or the
// other. Each side is a primary-key range scan within the batch's window
// (driver.ReplayWindow), stopped at the limit: a replay reads each row of
// its ID range once, whatever the filter, and never sorts the history.
func (d *Driver) ReplayBatch(ctx context.Context, p driver.ReplayParams) ([]driver.Event, int64, error) {
	sqlText, args, err := d.replayBatchSQL(p)
	if err != nil {
		return nil, p.AfterID, err
	}
	rows, err := d.pool.Query(ctx, sqlText, args...)
	if err != nil {
		return nil, p.AfterID, wrap(err)
	}
	_, upTo, limit := driver.ReplayBounds(p)
	events, err := collectEvents(rows, limit)
	if err != nil {
		return nil, p.AfterID, wrap(err)
	}
	var last int64
	if len(events) > 0 {
		last = events[len(events)-1].ID
	}
	return events, driver.ReplayNext(len(events), last, upTo, limit), nil
}

// replayBatchSQL is ReplayBatch's statement and its arguments.
func (d *Driver) replayBatchSQL(p driver.ReplayParams) (string, []any, error) {
	after, upTo, limit := driver.ReplayBounds(p)
	p.AfterID, p.UpToID = after, upTo
	table, archive, f, err := d.replayBranches(p, func(archive bool) string {
		cols := eventColumns("")
		if archive {
			cols = strings.TrimSuffix(cols, "lease_expiries") + "0"
		}
		return cols
	})
	if err != nil {
		return "", nil, err
	}
	// Each side is limited on its own, so the planner walks its primary
	// key in order and stops at the limit, and the window bounds the walk
	// when the filter matches few rows.
	lim := f.param(limit)
	sqlText := `(` + table + ` ORDER BY id LIMIT ` + lim + `)
UNION ALL
(` + archive + ` ORDER BY id LIMIT ` + lim + `)
ORDER BY 1
LIMIT ` + lim
	return sqlText, f.args, nil
}

// CountReplay counts the delivered events a replay would read: the same two
// range scans, to the end.
func (d *Driver) CountReplay(ctx context.Context, p driver.ReplayParams) (int64, error) {
	table, archive, f, err := d.replayBranches(p, func(bool) string { return "count(*)" })
	if err != nil {
		return 0, err
	}
	var n int64
	err = d.pool.QueryRow(ctx, `SELECT (`+table+`) + (`+archive+`)`, f.args...).Scan(&n)
	return n, wrap(err)
}

// MaxEventID reads the highest ID of the table and of the archive, each
// from the end of its primary key.
func (d *Driver) MaxEventID(ctx context.Context) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, `SELECT greatest(
    coalesce((SELECT max(id) FROM `+d.table+`), 0),
    coalesce((SELECT max(id) FROM `+archiveTable(d.table)+`), 0))`).Scan(&n)
	return n, wrap(err)
}
