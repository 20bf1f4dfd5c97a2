package sqldriver

import (
	"context"
	"strings"

	"github.com/outboxkit/outbox/internal/driver"
)

var _ driver.KeyPruner = (*Driver)(nil)

// HasKeyRows reports whether the dialect keeps outbox_keys (KeySequenced).
func (d *Driver) HasKeyRows() bool {
	_, ok := d.d.(KeySequenced)
	return ok
}

// PruneKeysBatch deletes the outbox_keys rows (see KeySequenced) of
// aggregates that have no unfinished event, walking the table in primary
// key order from after, limit rows a batch, in one transaction each:
//
//  1. lock up to limit key rows after the cursor, FOR UPDATE SKIP LOCKED;
//  2. look the locked keys up in outbox_events_key_order_idx, which holds
//     exactly the unfinished (pending, processing, failed) events by key;
//  3. delete the locked rows whose key had none.
//
// Why a deleted row, recreated at 1 by the next writer of its aggregate,
// keeps the order: a writer's trigger holds its key row's lock from its
// insert to its commit or rollback, so a row this transaction locks has
// no writer in flight, and every writer that held it before has ended; the
// lookup runs after the lock was granted and, at READ COMMITTED (Begin),
// sees every event they committed. A writer that comes later waits on the
// lock until this transaction commits, then finds no row and starts at 1.
// So when a row goes, the aggregate has no unfinished event, committed or
// about to be, and the events numbered from 1 afterwards are the only
// unfinished ones of their key: the claim, which orders a key's unfinished
// events by key_seq and reads only those, never sees a new event ahead of
// an old one. An event never becomes unfinished again once processed,
// except by a replay (processed back to pending): a replayed event keeps
// its old key_seq, so after a prune it may be sent after events written
// later; a replay repeats events already delivered and is outside the
// first-delivery order anyway. Failed events count as unfinished: a dead
// letter may be retried, and the ordered claim waits on it.
//
// On a dialect without a key sequence, or a schema before migration 7, it
// returns at once with more false.
func (d *Driver) PruneKeysBatch(ctx context.Context, after driver.KeyCursor, limit int) (int64, driver.KeyCursor, bool, error) {
	if !d.HasKeyRows() || limit < 1 {
		return 0, after, false, nil
	}
	keys := d.d.Table(d.schema, "outbox_keys")
	var (
		deleted int64
		next    driver.KeyCursor
		more    bool
	)
	err := d.inTx(ctx, func(tx Tx) error {
		deleted, next, more = 0, after, false
		// The OR form (not a row comparison) is what MariaDB's range
		// optimizer reads as a range of the primary key; SKIP LOCKED passes
		// over the rows of writers in flight, which keep their key anyway.
		locked, err := func() ([]driver.KeyCursor, error) {
			rows, err := tx.QueryContext(ctx, `SELECT aggregate_type, aggregate_id FROM `+keys+`
WHERE aggregate_type > ? OR (aggregate_type = ? AND aggregate_id > ?)
ORDER BY aggregate_type, aggregate_id
LIMIT ?`+d.d.ForUpdateSkipLocked(), after.AggregateType, after.AggregateType, after.AggregateID, limit)
			if err != nil {
				return nil, err
			}
			defer func() { _ = rows.Close() }()
			var locked []driver.KeyCursor
			for rows.Next() {
				var k driver.KeyCursor
				if err := rows.Scan(&k.AggregateType, &k.AggregateID); err != nil {
					return nil, err
				}
				locked = append(locked, k)
			}
			return locked, rows.Err()
		}()
		if err != nil {
			return err
		}
		if len(locked) == 0 {
			return nil
		}
		next, more = locked[len(locked)-1], len(locked) == limit
		live, err := d.unfinishedKeys(ctx, tx, locked)
		if err != nil {
			return err
		}
		var (
			conds []string
			args  []any
		)
		for _, k := range locked {
			if !live[k] {
				conds = append(conds, `(aggregate_type = ? AND aggregate_id = ?)`)
				args = append(args, k.AggregateType, k.AggregateID)
			}
		}
		if len(conds) == 0 {
			return nil
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM `+keys+` WHERE `+strings.Join(conds, " OR "), args...)
		if err != nil {
			return err
		}
		deleted, err = res.RowsAffected()
		return err
	})
	if err != nil && d.d.IsNoTable(err) {
		// Before migration 7 there is no key table to prune.
		return 0, after, false, nil
	}
	return deleted, next, more, err
}

// unfinishedKeys returns which of keys have an unfinished event: an entry
// under their key in outbox_events_key_order_idx, whose order_id and
// order_type are NULL once an event is processed. One probe of the index
// per key, in one statement.
func (d *Driver) unfinishedKeys(ctx context.Context, tx Tx, keys []driver.KeyCursor) (map[driver.KeyCursor]bool, error) {
	conds := make([]string, len(keys))
	args := make([]any, 0, 2*len(keys))
	for i, k := range keys {
		conds[i] = `(order_id = ? AND order_type = ?)`
		args = append(args, k.AggregateID, k.AggregateType)
	}
	rows, err := tx.QueryContext(ctx, `SELECT DISTINCT order_type, order_id FROM `+d.table+d.d.Index("outbox_events_key_order_idx")+`
WHERE `+strings.Join(conds, " OR "), args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	live := make(map[driver.KeyCursor]bool, len(keys))
	for rows.Next() {
		var k driver.KeyCursor
		if err := rows.Scan(&k.AggregateType, &k.AggregateID); err != nil {
			return nil, err
		}
		live[k] = true
	}
	return live, rows.Err()
}
