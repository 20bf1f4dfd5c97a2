package sqldriver

import (
	"context"
	"strings"

	"github.com/outboxkit/outbox/internal/driver"
)

// replayWhere is the WHERE clause and arguments of a replay read, for
// either side (the table adds its status).
func (d *Driver) replayWhere(p driver.ReplayParams) (string, []any, error) {
	flt := p.Filter
	flt.Status, flt.MinAttempts = "", 0
	f, err := d.filter(flt)
	if err != nil {
		return "", nil, err
	}
	f.add("id > ?", p.AfterID)
	if p.UpToID > 0 {
		f.add("id <= ?", p.UpToID)
	}
	return f.clause(), f.args, nil
}

// ReplayBatch reads one keyset batch of delivered events from the table and
// the archive in one statement (one snapshot on MySQL's InnoDB and in
// SQLite's read transaction), so an event archived between two batches is
// read once. Each side is a primary-key range scan within the batch's
// window (driver.ReplayWindow), limited on its own; the two short lists
// are then merged: no statement sorts more than twice the batch.
func (d *Driver) ReplayBatch(ctx context.Context, p driver.ReplayParams) ([]driver.Event, int64, error) {
	after, upTo, limit := driver.ReplayBounds(p)
	p.AfterID, p.UpToID = after, upTo
	where, args, err := d.replayWhere(p)
	if err != nil {
		return nil, after, err
	}
	archiveCols := strings.TrimSuffix(d.cols, "lease_expiries") + "0 AS lease_expiries"
	query := `SELECT * FROM (SELECT ` + d.cols + ` FROM ` + d.table + where + ` AND status = 'processed' ORDER BY id LIMIT ?) AS t
UNION ALL
SELECT * FROM (SELECT ` + archiveCols + ` FROM ` + d.archive + where + ` ORDER BY id LIMIT ?) AS a
ORDER BY 1
LIMIT ?`
	all := make([]any, 0, 2*len(args)+3)
	all = append(all, args...)
	all = append(all, limit)
	all = append(all, args...)
	all = append(all, limit, limit)
	events, err := queryEvents(ctx, d.db, limit, query, all...)
	if err != nil {
		return nil, after, d.wrap(err)
	}
	var last int64
	if len(events) > 0 {
		last = events[len(events)-1].ID
	}
	return events, driver.ReplayNext(len(events), last, upTo, limit), nil
}

// CountReplay counts the delivered events a replay would read.
func (d *Driver) CountReplay(ctx context.Context, p driver.ReplayParams) (int64, error) {
	where, args, err := d.replayWhere(p)
	if err != nil {
		return 0, err
	}
	var n int64
	err = d.db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM `+d.table+where+` AND status = 'processed')
    + (SELECT count(*) FROM `+d.archive+where+`)`, append(append([]any{}, args...), args...)...).Scan(&n)
	return n, d.wrap(err)
}

// MaxEventID reads the highest ID of the table and of the archive.
func (d *Driver) MaxEventID(ctx context.Context) (int64, error) {
	var a, b int64
	err := d.db.QueryRowContext(ctx, `SELECT coalesce((SELECT max(id) FROM `+d.table+`), 0),
    coalesce((SELECT max(id) FROM `+d.archive+`), 0)`).Scan(&a, &b)
	return max(a, b), d.wrap(err)
}
