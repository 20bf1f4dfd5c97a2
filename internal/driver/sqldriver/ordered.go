package sqldriver

import (
	"context"
	"slices"
	"strconv"

	"github.com/outboxkit/outbox/internal/driver"
)

var _ driver.OrderedClaimer = (*Driver)(nil)

// CommitOrderedIDs is implemented by a dialect whose IDs are handed out in
// commit order: every event of a transaction that committed before another
// has a lower ID than all of the other's. SQLite is one (one write
// transaction at a time, and AUTOINCREMENT never reuses an ID), so a key's
// events are ordered by ID and the ordered claim needs no more.
//
// MySQL/MariaDB is not: AUTO_INCREMENT hands out IDs at insert time and
// concurrent transactions commit in any order, so an event with a lower ID
// may become visible after one with a higher ID of the same key was read,
// and even sent; and, unlike PostgreSQL's snapshot xmin, InnoDB exposes no
// horizon below which every writer has ended (information_schema.innodb_trx
// says nothing about which IDs a running transaction took). Ordering by ID
// there would lose or reorder events, so ordered mode refuses it.
//
// The design it would take: a per-key sequence. A keys table
// (aggregate_type, aggregate_id, seq) and a BEFORE INSERT trigger on
// outbox_events that runs INSERT … ON DUPLICATE KEY UPDATE seq =
// LAST_INSERT_ID(seq + 1) on the key's row and sets NEW.key_seq =
// LAST_INSERT_ID(), so writers in any language keep their plain INSERT. The
// upsert takes the key row's lock until the writer's transaction ends, so:
// (1) a later writer of the key waits for the earlier one to commit or roll
// back before it gets its number, hence a key's events commit in key_seq
// order; (2) a rollback undoes its increment with the rest, hence key_seq
// is dense per key: no gaps. The claim then takes, per key, the unfinished
// event with the lowest key_seq and its due successors, exactly as here with
// key_seq in place of id, and can never see event n+1 of a key before event
// n is committed. The cost is a lock per key in the writer's transaction
// (writers of one aggregate serialize, which the application usually does
// anyway on the aggregate's own row) and a trigger, so it waits for a
// measured migration rather than going in untested.
type CommitOrderedIDs interface {
	// IDsInCommitOrder is a marker.
	IDsInCommitOrder()
}

// OrderingSupported returns nil on a dialect whose IDs follow commit order
// and driver.ErrOrderingUnsupported on the others.
func (d *Driver) OrderingSupported() error {
	if _, ok := d.d.(CommitOrderedIDs); !ok {
		return driver.ErrOrderingUnsupported
	}
	return nil
}

// keyMatch says rows a and b share an aggregate, in the terms of
// outbox_events_key_order_idx (aggregate_type coalesced to ”).
func keyMatch(a, b string) string {
	return `coalesce(` + a + `.aggregate_type, '') = coalesce(` + b + `.aggregate_type, '') AND ` + a + `.aggregate_id = ` + b + `.aggregate_id`
}

// unfinished is the condition under which row a holds back the later
// events of its aggregate: pending (due or in backoff), processing, or,
// under the block policy, failed and not discarded by an operator. The
// first conjunct is outbox_events_key_order_idx's predicate, word for word,
// so that SQLite uses the partial index.
func unfinished(a string, skip bool) string {
	c := a + `.status IN ('pending', 'processing', 'failed') AND ` + a + `.aggregate_id IS NOT NULL AND `
	if skip {
		return c + a + `.status <> 'failed'`
	}
	return c + `(` + a + `.status <> 'failed' OR ` + a + `.dead_letter_retries <> ` + strconv.Itoa(driver.DiscardedRetries) + `)`
}

// ClaimOrdered leases a batch that keeps per-aggregate order, on a dialect
// whose IDs follow commit order (the claim runs under the database's one
// write lock there, so it sees every committed event and no other claim
// runs at the same time). Three statements in one transaction:
//
//   - heads: up to half the batch size of due pending events with no
//     unfinished event of their key before them (one probe of
//     outbox_events_key_order_idx each), in due order;
//   - runs: for the heads with a key, the events of the key that follow
//     the head, at most the batch size over the number of heads each (the
//     bound is the ID of the key's k-th follower, one more probe per head),
//     with whether each can go now (pending, due, not a suspect);
//   - the update of the IDs picked: a suspect head (lease expiry on
//     record) alone, as in the unordered claim; otherwise the heads in due
//     order, each followed by its run up to the first event that cannot go,
//     cut at the batch size (a cut run is a prefix: still in order).
func (d *Driver) ClaimOrdered(ctx context.Context, p driver.OrderedClaimParams) (driver.Claim, error) {
	if err := d.OrderingSupported(); err != nil {
		return driver.Claim{}, err
	}
	var claim driver.Claim
	err := d.inTx(ctx, func(tx Tx) error {
		claim = driver.Claim{}
		var now Time
		heads, err := queryEventsWith(ctx, tx, p.BatchSize, &now, `SELECT `+eventColumns("e.")+`, `+d.d.Now()+`
FROM `+d.table+` e
WHERE e.status = 'pending' AND e.available_at <= `+d.d.Now()+`
  AND (e.aggregate_id IS NULL OR NOT EXISTS (
      SELECT 1 FROM `+d.table+` o
      WHERE `+keyMatch("o", "e")+` AND `+unfinished("o", p.Skip)+` AND o.id < e.id))
ORDER BY e.available_at, e.id
LIMIT ?`, max(p.BatchSize/2, 1))
		if err != nil || len(heads) == 0 {
			return err
		}
		pick := d.orderedPick(heads)
		if len(pick) == 0 {
			var runs map[int64][]orderedFollower
			if runs, err = d.followers(ctx, tx, heads, p); err != nil {
				return err
			}
			pick = pickRuns(heads, runs, p.BatchSize)
		}
		lockedUntil, err := d.parseStored(d.d.FormatTime(now.Add(p.Lease)))
		if err != nil {
			return err
		}
		ids := make([]int64, len(pick))
		for i := range pick {
			ids[i] = pick[i].ID
		}
		upd := append([]any{p.RelayID, d.d.FormatTime(lockedUntil), d.d.FormatTime(now.Time)}, int64Args(ids)...)
		if _, err := tx.ExecContext(ctx, `UPDATE `+d.table+`
SET status = 'processing', locked_by = ?, locked_until = ?, updated_at = ?
WHERE id IN (`+placeholders(len(ids))+`) AND status = 'pending'`, upd...); err != nil {
			return err
		}
		for i := range pick {
			e := &pick[i]
			e.Status, e.LockedBy, e.LockedUntil, e.UpdatedAt = driver.StatusProcessing, p.RelayID, lockedUntil, now.Time
		}
		claim = driver.Claim{Events: pick, LockedUntil: lockedUntil}
		return nil
	})
	return claim, err
}

// orderedPick returns the first suspect head alone, or nil when no head is
// a suspect.
func (d *Driver) orderedPick(heads []driver.Event) []driver.Event {
	for _, h := range heads {
		if h.LeaseExpiries > 0 {
			return []driver.Event{h}
		}
	}
	return nil
}

// orderedFollower is an event after a head, and whether it can go now.
type orderedFollower struct {
	event driver.Event
	ok    bool
}

// followers reads, for every head with a key, the unfinished events of the
// key after it, in ID order, at most the batch size over the number of
// heads per key.
func (d *Driver) followers(ctx context.Context, tx Tx, heads []driver.Event, p driver.OrderedClaimParams) (map[int64][]orderedFollower, error) {
	var keyed []int64
	for _, h := range heads {
		if h.AggregateID != "" {
			keyed = append(keyed, h.ID)
		}
	}
	if len(keyed) == 0 {
		return nil, nil
	}
	per := max(p.BatchSize/len(heads), 1)
	// The bound: the ID of the head's per-th follower, or the largest ID
	// when the key has fewer, one probe of outbox_events_key_order_idx per
	// head; then the followers up to it, a range of the same index. The
	// heads are materialized so that the bound is computed once per head,
	// not once per follower, and bounds the range scan from above.
	args := append([]any{per - 1}, int64Args(keyed)...)
	rows, err := tx.QueryContext(ctx, `WITH h AS MATERIALIZED (
    SELECT h.id, h.aggregate_type, h.aggregate_id, coalesce((
        SELECT b.id FROM `+d.table+` b
        WHERE `+keyMatch("b", "h")+` AND `+unfinished("b", p.Skip)+` AND b.id > h.id
        ORDER BY b.id LIMIT 1 OFFSET ?), 9223372036854775807) AS bound
    FROM `+d.table+` h
    WHERE h.id IN (`+placeholders(len(keyed))+`)
)
SELECT `+eventColumns("o.")+`, h.id,
    (o.status = 'pending' AND o.available_at <= `+d.d.Now()+` AND o.lease_expiries = 0)
FROM h
JOIN `+d.table+` o ON `+keyMatch("o", "h")+` AND `+unfinished("o", p.Skip)+`
    AND o.id > h.id AND o.id <= h.bound
ORDER BY h.id, o.id`, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	out := map[int64][]orderedFollower{}
	for rows.Next() {
		var (
			f    orderedFollower
			head int64
		)
		if f.event, err = scanEvent(rows, &head, &f.ok); err != nil {
			return nil, err
		}
		out[head] = append(out[head], f)
	}
	return out, rows.Err()
}

// pickRuns lays out the batch: each head in due order followed by the
// events of its run that can go, up to the first that cannot, cut at size.
func pickRuns(heads []driver.Event, runs map[int64][]orderedFollower, size int) []driver.Event {
	out := make([]driver.Event, 0, min(size, len(heads)*2))
	for _, h := range heads {
		if len(out) == size {
			break
		}
		out = append(out, h)
		for _, f := range runs[h.ID] {
			if !f.ok || len(out) == size {
				break
			}
			out = append(out, f.event)
		}
	}
	return slices.Clip(out)
}

// BlockedAggregates lists aggregates held back by a failed first event:
// keys whose head (first unfinished event) is failed, or pending in backoff
// after a failed attempt, while later events of the key wait. It reads only
// unfinished rows (the key-order, pending and failed indexes).
func (d *Driver) BlockedAggregates(ctx context.Context, skip bool, limit int) ([]driver.BlockedAggregate, int64, error) {
	if err := d.OrderingSupported(); err != nil {
		return nil, 0, err
	}
	from := `FROM ` + d.table + ` h
WHERE ` + unfinished("h", skip) + `
  AND (h.status = 'failed' OR (h.status = 'pending' AND h.attempts > 0 AND h.available_at > ` + d.d.Now() + `))
  AND NOT EXISTS (SELECT 1 FROM ` + d.table + ` o WHERE ` + keyMatch("o", "h") + ` AND ` + unfinished("o", skip) + ` AND o.id < h.id)
  AND EXISTS (SELECT 1 FROM ` + d.table + ` w WHERE ` + keyMatch("w", "h") + ` AND ` + unfinished("w", skip) + ` AND w.id > h.id)`
	var total int64
	if err := d.db.QueryRowContext(ctx, `SELECT count(*) `+from).Scan(&total); err != nil {
		return nil, 0, d.wrap(err)
	}
	if total == 0 || limit <= 0 {
		return nil, total, nil
	}
	rows, err := d.db.QueryContext(ctx, `SELECT coalesce(h.aggregate_type, ''), h.aggregate_id, h.id, h.status,
    (SELECT count(*) FROM `+d.table+` w WHERE `+keyMatch("w", "h")+` AND `+unfinished("w", skip)+` AND w.id > h.id)
`+from+`
ORDER BY h.id
LIMIT ?`, limit)
	if err != nil {
		return nil, 0, d.wrap(err)
	}
	defer func() { _ = rows.Close() }()
	var out []driver.BlockedAggregate
	for rows.Next() {
		var b driver.BlockedAggregate
		if err := rows.Scan(&b.AggregateType, &b.AggregateID, &b.HeadID, &b.HeadStatus, &b.Waiting); err != nil {
			return nil, 0, d.wrap(err)
		}
		out = append(out, b)
	}
	return out, total, d.wrap(rows.Err())
}
