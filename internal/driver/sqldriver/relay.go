package sqldriver

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

// Claim leases a batch of due pending events: it selects them (locking them
// with SKIP LOCKED on MySQL, under the write lock on SQLite) together with
// the database clock, then updates exactly those IDs. The lease's end is
// that clock plus the lease, so it is the database's time, and it is bound
// as the stored text so that the fence compares exactly.
func (d *Driver) Claim(ctx context.Context, p driver.ClaimParams) (driver.Claim, error) {
	if p.CaptureSlot != "" {
		return driver.Claim{}, errors.New("change-data capture needs PostgreSQL")
	}
	var claim driver.Claim
	err := d.inTx(ctx, func(tx Tx) error {
		var (
			args   []any
			filter string
		)
		if len(p.EventTypes) > 0 {
			var cond string
			cond, args = d.d.TypeMatch(p.EventTypes)
			filter = "\n  AND " + cond
		}
		// Served by outbox_events_pending_idx: (available_at, id) among
		// pending rows on SQLite, (status, available_at, id) on MySQL,
		// where the index is forced: read in its order, the select stops
		// at the limit, whereas a table scan and a sort would lock every
		// due row it met until the claim commits, and other relays would
		// skip them all.
		var (
			now    Time
			events []driver.Event
			err    error
		)
		due := `
FROM ` + d.table + d.d.Index("outbox_events_pending_idx") + `
WHERE status = 'pending' AND available_at <= ` + d.d.Now() + filter + `
ORDER BY available_at, id
LIMIT ?` + d.d.ForUpdateSkipLocked()
		if p.MaxBytes > 0 {
			events, err = d.claimWithin(ctx, tx, p, due, append(args, p.BatchSize), &now)
		} else {
			events, err = queryEventsWith(ctx, tx, p.BatchSize, &now, `SELECT `+d.cols+`, `+d.d.Now()+due,
				append(args, p.BatchSize)...)
			events = driver.IsolateSuspect(events)
		}
		if err != nil || len(events) == 0 {
			return err
		}
		lockedUntil, err := d.parseStored(d.d.FormatTime(now.Add(p.Lease)))
		if err != nil {
			return err
		}
		ids := make([]int64, len(events))
		for i := range events {
			ids[i] = events[i].ID
		}
		upd := append([]any{p.RelayID, d.d.FormatTime(lockedUntil), d.d.FormatTime(now.Time)}, int64Args(ids)...)
		if _, err := tx.ExecContext(ctx, `UPDATE `+d.table+d.d.ByID()+`
SET status = 'processing', locked_by = ?, locked_until = ?, updated_at = ?
WHERE id IN (`+placeholders(len(ids))+`) AND status = 'pending'`, upd...); err != nil {
			return err
		}
		for i := range events {
			e := &events[i]
			e.Status, e.LockedBy, e.LockedUntil, e.UpdatedAt = driver.StatusProcessing, p.RelayID, lockedUntil, now.Time
		}
		claim = driver.Claim{Events: events, LockedUntil: lockedUntil}
		return nil
	})
	return claim, err
}

// claimWithin is the select of a claim with a byte budget: it locks the
// due rows reading only their IDs, flags and sizes (due is the select's
// FROM … LIMIT ? tail, args its arguments), picks the suspect alone or the
// rows that fit the budget, and reads the whole of those rows only.
func (d *Driver) claimWithin(ctx context.Context, tx Tx, p driver.ClaimParams, due string, args []any, now *Time) ([]driver.Event, error) {
	ids, sizes, suspect, err := d.lockDue(ctx, tx, due, args, now)
	if err != nil {
		return nil, err
	}
	switch {
	case len(ids) == 0:
		return nil, nil
	case suspect != 0:
		ids = []int64{suspect}
	default:
		ids = ids[:driver.FitBudget(sizes, p.MaxBytes)]
	}
	return queryEvents(ctx, tx, len(ids), `SELECT `+d.cols+` FROM `+d.table+d.d.ByID()+`
WHERE id IN (`+placeholders(len(ids))+`) AND status = 'pending'
ORDER BY available_at, id`, int64Args(ids)...)
}

// lockDue runs the select of claimWithin: the due rows' IDs and sizes in
// claim order, and the first suspect's ID (0 for none).
func (d *Driver) lockDue(ctx context.Context, tx Tx, due string, args []any, now *Time) (ids, sizes []int64, suspect int64, err error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, lease_expiries, `+d.d.ByteLength("payload")+` + `+d.d.ByteLength("headers")+`, `+d.d.Now()+due, args...)
	if err != nil {
		return nil, nil, 0, err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var id, expiries, size int64
		if err := rows.Scan(&id, &expiries, &size, now); err != nil {
			return nil, nil, 0, err
		}
		if expiries > 0 && suspect == 0 {
			suspect = id
		}
		ids, sizes = append(ids, id), append(sizes, size)
	}
	return ids, sizes, suspect, rows.Err()
}

// parseStored reads a timestamp back from its stored text form, so the
// lease the relay keeps is exactly what the row holds.
func (d *Driver) parseStored(s string) (time.Time, error) {
	var t Time
	err := t.Scan(s)
	return t.Time, err
}

// fence is the WHERE clause a mark needs: the IDs, still processing, under
// the same lease. The IDs are looked up by primary key (Dialect.ByID and
// DeleteByID): the status and lease columns only filter.
func (d *Driver) fence(f driver.Fence, ids []int64) (string, []any) {
	args := append(int64Args(ids), f.RelayID, d.d.FormatTime(f.LockedUntil))
	return `id IN (` + placeholders(len(ids)) + `) AND status = 'processing' AND locked_by = ? AND locked_until = ?`, args
}

// MarkProcessed marks published events processed, or deletes or archives
// them, if they still hold the fence. Each mark is a transaction of its
// own (Dialect.Begin).
func (d *Driver) MarkProcessed(ctx context.Context, f driver.Fence, ids []int64, retention driver.Retention) (int64, error) {
	where, args := d.fence(f, ids)
	switch retention {
	case driver.RetainDelete:
		return d.exec(ctx, d.d.DeleteByID(d.table)+` WHERE `+where, args...)
	case driver.RetainArchive:
		return d.archiveFenced(ctx, where, args)
	}
	return d.exec(ctx, `UPDATE `+d.table+d.d.ByID()+`
SET status = 'processed', processed_at = `+d.d.Now()+`, updated_at = `+d.d.Now()+`, locked_until = NULL
WHERE `+where, args...)
}

// archiveFenced moves the fenced rows to the archive table: it locks them
// first, so the copy and the delete see the same rows (the delete tests the
// fence again, which keeps it to the primary key; see Dialect.ByID).
func (d *Driver) archiveFenced(ctx context.Context, where string, args []any) (int64, error) {
	var n int64
	err := d.inTx(ctx, func(tx Tx) error {
		ids, err := queryIDs(ctx, tx, `SELECT id FROM `+d.table+d.d.ByID()+` WHERE `+where+d.d.ForUpdate(), args...)
		if err != nil || len(ids) == 0 {
			return err
		}
		in := placeholders(len(ids))
		const cols = `id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
    attempts, max_attempts, last_error, available_at, locked_by, created_at`
		// An ID already archived keeps its archived row (see
		// Dialect.KeepExisting): a conflict must not fail the whole
		// batch's mark, every time.
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+d.archive+` (`+cols+`, status, updated_at, processed_at)
SELECT `+cols+`, 'processed', `+d.d.Now()+`, `+d.d.Now()+`
FROM `+d.table+d.d.ByID()+` WHERE id IN (`+in+`)`+d.d.KeepExisting(d.archive), int64Args(ids)...); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, d.d.DeleteByID(d.table)+` WHERE `+where, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// MarkFailed records failed publishes. The rows still under the fence are
// read and locked first; whether each one is dead is decided from its own
// attempts and max_attempts as read under that lock, so an operator's change
// to max_attempts during the publish still counts.
func (d *Driver) MarkFailed(ctx context.Context, f driver.Fence, maxAttempts int, failures []driver.Failure) (driver.FailResult, error) {
	var res driver.FailResult
	ids := make([]int64, len(failures))
	for i, fl := range failures {
		ids[i] = fl.ID
	}
	err := d.inTx(ctx, func(tx Tx) error {
		res = driver.FailResult{}
		where, args := d.fence(f, ids)
		holds, err := d.held(ctx, tx, where, args, maxAttempts)
		if err != nil {
			return err
		}
		for _, fl := range failures {
			h, ok := holds[fl.ID]
			if !ok {
				continue // lost the lease: another relay owns the event
			}
			delete(holds, fl.ID) // a duplicate ID in failures counts once
			if fl.Permanent || h.attempts+1 >= h.max {
				// The attempts assignment comes last: MySQL evaluates SET
				// left to right, with later expressions seeing earlier
				// assignments.
				_, err = tx.ExecContext(ctx, `UPDATE `+d.table+d.d.ByID()+`
SET status = 'failed', last_error = ?, locked_until = NULL, updated_at = `+d.d.Now()+`, attempts = attempts + 1
WHERE id = ?`, fl.Error, fl.ID)
				res.Dead = append(res.Dead, fl.ID)
			} else {
				_, err = tx.ExecContext(ctx, `UPDATE `+d.table+d.d.ByID()+`
SET status = 'pending', last_error = ?, locked_until = NULL, updated_at = `+d.d.Now()+`,
    available_at = `+d.d.NowPlusMillis()+`, attempts = attempts + 1
WHERE id = ?`, fl.Error, fl.Delay.Milliseconds(), fl.ID)
				res.Retried = append(res.Retried, fl.ID)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return driver.FailResult{}, err
	}
	return res, nil
}

// held is an event's attempts and limit as MarkFailed reads them.
type held struct{ attempts, max int }

// held reads and locks the rows under the fence.
func (d *Driver) held(ctx context.Context, tx Tx, where string, args []any, maxAttempts int) (map[int64]held, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, attempts, max_attempts FROM `+d.table+d.d.ByID()+` WHERE `+where+d.d.ForUpdate(), args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	holds := map[int64]held{}
	for rows.Next() {
		var (
			id, attempts int64
			maxA         *int64
		)
		if err := rows.Scan(&id, &attempts, &maxA); err != nil {
			return nil, err
		}
		h := held{attempts: int(attempts), max: maxAttempts}
		if maxA != nil {
			h.max = int(*maxA)
		}
		holds[id] = h
	}
	return holds, rows.Err()
}

// Release returns events to pending without spending an attempt.
func (d *Driver) Release(ctx context.Context, f driver.Fence, ids []int64) (int64, error) {
	where, args := d.fence(f, ids)
	return d.exec(ctx, `UPDATE `+d.table+d.d.ByID()+`
SET status = 'pending', locked_until = NULL, updated_at = `+d.d.Now()+`
WHERE `+where, args...)
}

// RescueExpired settles up to p.Limit events whose lease expired: back to
// pending, or to failed once out of attempts. It reads the processing index
// only, and skips rows a relay is marking right now. Rows that end with the
// same status and last error (those of one dead relay, as a rule) are
// written by one statement.
func (d *Driver) RescueExpired(ctx context.Context, p driver.RescueParams) (driver.RescueResult, error) {
	var res driver.RescueResult
	err := d.inTx(ctx, func(tx Tx) error {
		res = driver.RescueResult{}
		expired, err := d.readExpired(ctx, tx, p)
		if err != nil || len(expired) == 0 {
			return err
		}
		type outcome struct{ status, lastError string }
		groups := map[outcome][]int64{}
		var order []outcome
		var dead []int64
		for _, e := range expired {
			status, lastErr := e.Rescue()
			o := outcome{status, lastErr}
			if _, ok := groups[o]; !ok {
				order = append(order, o)
			}
			groups[o] = append(groups[o], e.ID)
			if status == driver.StatusFailed {
				dead = append(dead, e.ID)
			} else {
				res.Rescued = append(res.Rescued, e.ID)
			}
		}
		for _, o := range order {
			ids := groups[o]
			args := append([]any{o.status, o.lastError}, int64Args(ids)...)
			// The counters come last: MySQL evaluates SET left to right.
			if _, err := tx.ExecContext(ctx, `UPDATE `+d.table+d.d.ByID()+`
SET status = ?, last_error = ?, locked_until = NULL, updated_at = `+d.d.Now()+`,
    attempts = attempts + 1, lease_expiries = lease_expiries + 1
WHERE id IN (`+placeholders(len(ids))+`)`, args...); err != nil {
				return err
			}
		}
		if len(dead) > 0 {
			res.Dead, err = queryEvents(ctx, tx, len(dead), `SELECT `+d.cols+` FROM `+d.table+d.d.ByID()+`
WHERE id IN (`+placeholders(len(dead))+`) ORDER BY id`, int64Args(dead)...)
		}
		return err
	})
	if err != nil {
		return driver.RescueResult{}, err
	}
	slices.Sort(res.Rescued)
	return res, nil
}

// readExpired reads and locks up to p.Limit expired leases.
func (d *Driver) readExpired(ctx context.Context, tx Tx, p driver.RescueParams) ([]driver.Expired, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, attempts, lease_expiries, coalesce(max_attempts, ?), coalesce(last_error, ''), coalesce(locked_by, '')
FROM `+d.table+d.d.Index("outbox_events_processing_idx")+`
WHERE status = 'processing' AND locked_until < `+d.d.Now()+`
ORDER BY locked_until
LIMIT ?`+d.d.ForUpdateSkipLocked(), p.MaxAttempts, p.Limit)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []driver.Expired
	for rows.Next() {
		var e driver.Expired
		if err := rows.Scan(&e.ID, &e.Attempts, &e.LeaseExpiries, &e.MaxAttempts, &e.LastError, &e.LockedBy); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
