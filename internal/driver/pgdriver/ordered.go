package pgdriver

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/driver"
)

var _ driver.OrderedClaimer = (*Driver)(nil)

// orderedQueries are the statements of ordered delivery, one per failure
// policy (block, skip) so that each keeps a plan of its own.
type orderedQueries struct {
	claimWindow, claim, blocked, blockedCount string
	// claimWindowBudget and claimBudget keep the batch within a byte
	// budget ($4, RelayConfig.MaxBatchBytes).
	claimWindowBudget, claimBudget string
	// held asks, after a claim that found no event, whether the horizon
	// left committed events out (driver.Claim.Held).
	held string
}

// orderedState is what ClaimOrdered remembers between claims.
type orderedState struct {
	fullAt  atomic.Int64 // when the last whole-backlog claim ran, Unix ns
	clogged atomic.Bool  // it found events the window had not
}

// orderedFullEvery bounds how often an ordered claim searches the whole
// backlog when its window finds nothing and is not known to be clogged.
const orderedFullEvery = time.Second

// orderedWindow is how many due pending events, per event of the batch
// size, the first try of an ordered claim looks at for heads.
const orderedWindow = 2

// keyMatch says rows a and b share an aggregate, in the terms of
// outbox_events_key_order_idx (aggregate_type coalesced to ”).
func keyMatch(a, b string) string {
	return `coalesce(` + a + `.aggregate_type, '') = coalesce(` + b + `.aggregate_type, '') AND ` + a + `.aggregate_id = ` + b + `.aggregate_id`
}

// unfinished is the condition under which row a holds back the later
// events of its aggregate: pending (due or in backoff), processing, or,
// under the block policy, failed and not discarded by an operator. The
// first conjunct matches outbox_events_key_order_idx's predicate.
func unfinished(a string, skip bool) string {
	c := a + `.status IN ('pending', 'processing', 'failed') AND `
	if skip {
		return c + a + `.status <> 'failed'`
	}
	return c + `(` + a + `.status <> 'failed' OR ` + a + `.dead_letter_retries <> ` + strconv.Itoa(driver.DiscardedRetries) + `)`
}

func buildOrderedQueries(t string, skip bool) orderedQueries {
	var q orderedQueries
	// The ordered claim. A key's events are ordered by (txid, id): the
	// writing transaction's ID, then insertion order within it. Only events
	// whose transaction ID is below the snapshot's xmin (the oldest
	// transaction still running) are read: their transactions have all
	// ended, so an event that becomes readable later has a larger txid than
	// every event read now, and a key's order never needs an event that has
	// not been seen yet.
	//
	// heads: at most half the batch size of due pending events (so that
	// another loop finds heads of its own in the same window) with no
	// unfinished event of their key
	// before them (one probe of outbox_events_key_order_idx each, read
	// backwards from the event, a scalar subquery since EXISTS would drop
	// the order: the entries of the key's delivered events
	// stay in the index until vacuum removes them, and they lie before its
	// head, so a follower's probe stops at the event just before it), in
	// pending-index order, locked with SKIP LOCKED so relays claim disjoint
	// keys. runs: for each head, the events of its key that follow it
	// (index order), as long as each is pending, due, readable and not a
	// suspect; they are locked too, and a run ends at the first that could
	// not be (another claim holds it). Each run reads at most the batch size
	// over the number of heads (at least one event), so that the rows read
	// stay near the batch size however many keys are due. A suspect head (lease expiry on
	// record) is claimed alone, as in the unordered claim. pick numbers the
	// result in publish order: heads in due order, each followed by its run,
	// cut at the batch size (a cut run is a prefix: still in order).
	claim := func(from, order string, budget bool) string {
		// pick numbers the batch in publish order and cuts it at the batch
		// size, and with a byte budget where the running total of stored
		// bytes (pg_column_size: compressed, nothing detoasted) passes it,
		// the first event always: a cut is a prefix of the publish order,
		// so each key keeps a prefix of its run, still in order.
		pick := `SELECT id, ord FROM (
        SELECT id, row_number() OVER (ORDER BY h, n) AS ord FROM (`
		cut := `
    ) v
    WHERE ord <= $1`
		if budget {
			pick = `SELECT id, ord FROM (
        SELECT u.id, row_number() OVER w AS ord,
               sum(pg_column_size(x.payload) + pg_column_size(x.headers)) OVER w AS total FROM (`
			cut = `
        JOIN ` + t + ` x ON x.id = u.id
        WINDOW w AS (ORDER BY u.h, u.n)
    ) v
    WHERE ord <= $1 AND (ord = 1 OR total <= $4)`
		}
		return `WITH horizon AS MATERIALIZED (
    SELECT pg_snapshot_xmin(pg_current_snapshot()) AS x
), heads AS MATERIALIZED (
    SELECT e.id, e.aggregate_type, e.aggregate_id, e.txid, e.available_at, e.lease_expiries
    FROM ` + from + `
    WHERE e.status = 'pending' AND e.available_at <= now()
      AND e.txid < (SELECT x FROM horizon)
      AND (e.aggregate_id IS NULL OR (
          SELECT o.id FROM ` + t + ` o
          WHERE ` + keyMatch("o", "e") + ` AND ` + unfinished("o", skip) + `
            AND (o.txid, o.id) < (e.txid, e.id)
          ORDER BY coalesce(o.aggregate_type, '') DESC, o.aggregate_id DESC, o.txid DESC, o.id DESC
          LIMIT 1) IS NULL)
    ` + order + `
    LIMIT greatest($1 / 2, 1)
    FOR UPDATE OF e SKIP LOCKED
), ranked AS MATERIALIZED (
    SELECT id, aggregate_type, aggregate_id, txid, lease_expiries,
           row_number() OVER (ORDER BY available_at, id) AS h
    FROM heads
), suspect AS MATERIALIZED (
    SELECT id FROM ranked WHERE lease_expiries > 0 ORDER BY h LIMIT 1
), runs AS MATERIALIZED (
    SELECT r.h, f.id, f.n
    FROM ranked r
    CROSS JOIN LATERAL (
        SELECT s.id, row_number() OVER w AS n, bool_and(s.ok) OVER w AS run
        FROM (
            SELECT o.id, o.txid,
                   (o.status = 'pending' AND o.available_at <= now() AND o.lease_expiries = 0
                    AND o.txid < (SELECT x FROM horizon)) AS ok
            FROM ` + t + ` o
            WHERE ` + keyMatch("o", "r") + ` AND ` + unfinished("o", skip) + `
              AND (o.txid, o.id) > (r.txid, r.id)
            ORDER BY o.txid, o.id
            LIMIT greatest($1 / (SELECT count(*) FROM ranked), 1)
        ) s
        WINDOW w AS (ORDER BY s.txid, s.id)
    ) f
    WHERE r.aggregate_id IS NOT NULL AND f.run AND NOT EXISTS (SELECT FROM suspect)
), locked AS MATERIALIZED (
    SELECT id FROM ` + t + `
    WHERE id = ANY(ARRAY(SELECT id FROM runs)) AND status = 'pending'
    FOR UPDATE SKIP LOCKED
), gaps AS MATERIALIZED (
    SELECT r.h, min(r.n) AS n FROM runs r
    WHERE NOT EXISTS (SELECT FROM locked l WHERE l.id = r.id)
    GROUP BY r.h
), cut AS MATERIALIZED (
    SELECT runs.h, runs.id, runs.n FROM runs LEFT JOIN gaps g ON g.h = runs.h
    WHERE g.n IS NULL OR runs.n < g.n
), pick AS MATERIALIZED (
    ` + pick + `
            SELECT id, 0::bigint AS h, 0::bigint AS n FROM suspect
            UNION ALL
            SELECT id, h, 0 FROM ranked WHERE NOT EXISTS (SELECT FROM suspect)
            UNION ALL
            SELECT id, h, n FROM cut
        ) u` + cut + `
), claimed (ord, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13) AS (
    UPDATE ` + t + ` AS e
    SET status = 'processing', locked_by = $2,
        locked_until = now() + $3::bigint * interval '1 millisecond', updated_at = now()
    FROM pick
    WHERE e.id = pick.id
    RETURNING pick.ord, ` + claimColumns + `
)
SELECT c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13 FROM claimed ORDER BY ord`
	}
	// The first try looks for heads among the first due pending events
	// only (orderedWindow times the batch size, read from
	// outbox_events_pending_idx without locking), so that a claim does not
	// probe every follower of the keys in flight; ClaimOrdered falls back to
	// the whole backlog when that finds nothing (the window may hold only
	// the waiting events of blocked keys). The window is read in due order;
	// the heads taken from it are not sorted again (ranked orders them), so
	// the scan stops once it has found enough.
	window := `(
        SELECT w.id FROM ` + t + ` w
        WHERE w.status = 'pending' AND w.available_at <= now()
        ORDER BY w.available_at, w.id
        LIMIT $1 * ` + strconv.Itoa(orderedWindow) + `
    ) win
    JOIN ` + t + ` e ON e.id = win.id`
	q.claimWindow = claim(window, "", false)
	q.claimWindowBudget = claim(window, "", true)
	q.claim = claim(t+" e", "ORDER BY e.available_at, e.id", false)
	q.claimBudget = claim(t+" e", "ORDER BY e.available_at, e.id", true)

	// Blocked aggregates: keys whose head (first unfinished event) is
	// failed, or pending in backoff after a failed attempt, while later
	// events of the key wait. Reads only unfinished rows (the key-order
	// index and the pending and failed partial indexes).
	blockedFrom := `FROM ` + t + ` h
    WHERE h.aggregate_id IS NOT NULL AND ` + unfinished("h", skip) + `
      AND (h.status = 'failed' OR (h.status = 'pending' AND h.attempts > 0 AND h.available_at > now()))
      AND NOT EXISTS (SELECT FROM ` + t + ` o WHERE ` + keyMatch("o", "h") + ` AND ` + unfinished("o", skip) + `
                      AND (o.txid, o.id) < (h.txid, h.id))
      AND EXISTS (SELECT FROM ` + t + ` w WHERE ` + keyMatch("w", "h") + ` AND ` + unfinished("w", skip) + `
                  AND (w.txid, w.id) > (h.txid, h.id))`
	q.blocked = `SELECT coalesce(h.aggregate_type, ''), h.aggregate_id, h.id, h.status,
    (SELECT count(*) FROM ` + t + ` w WHERE ` + keyMatch("w", "h") + ` AND ` + unfinished("w", skip) + `
     AND (w.txid, w.id) > (h.txid, h.id))
    ` + blockedFrom + `
ORDER BY h.id
LIMIT $1`
	q.blockedCount = `SELECT count(*) ` + blockedFrom
	// $1 is a horizon taken just before the claim, in the same round trip
	// (ClaimOrdered): at or below the claim's own, so every event the
	// claim left out for its horizon is at or above it.
	q.held = heldQuery(t, `$1::bigint::text::xid8`, ``)
	return q
}

// OrderingSupported is nil: PostgreSQL keeps the order.
func (d *Driver) OrderingSupported() error { return nil }

// ClaimOrdered leases a batch that keeps per-aggregate order.
func (d *Driver) ClaimOrdered(ctx context.Context, p driver.OrderedClaimParams) (driver.Claim, error) {
	q := d.ordered[0]
	if p.Skip {
		q = d.ordered[1]
	}
	window, full := q.claimWindow, q.claim
	args := []any{p.BatchSize, p.RelayID, p.Lease.Milliseconds()}
	if p.MaxBytes > 0 {
		window, full = q.claimWindowBudget, q.claimBudget
		args = append(args, p.MaxBytes)
	}
	// The first claim goes with the horizon just before it, in one round
	// trip, for the held probe (q.held).
	var horizon int64
	claimWith := func(sqlText string, withHorizon bool) ([]driver.Event, error) {
		var events []driver.Event
		batch := &pgx.Batch{}
		if withHorizon {
			batch.Queue(`SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`).QueryRow(func(row pgx.Row) error {
				return row.Scan(&horizon)
			})
		}
		batch.Queue(sqlText, args...).Query(func(rows pgx.Rows) error {
			var err error
			events, err = collectClaimed(rows, driver.ClaimParams{RelayID: p.RelayID, BatchSize: p.BatchSize})
			return err
		})
		return events, wrap(d.pool.SendBatch(ctx, batch).Close())
	}
	events, err := claimWith(window, true)
	if err != nil {
		return driver.Claim{}, err
	}
	// The whole backlog is searched when the window found nothing, but
	// while every due key is in flight that search finds nothing either, at
	// the cost of a probe per waiting event: it runs then at most once per
	// orderedFullEvery, and again on every claim once it found events the
	// window missed (the window is clogged with a blocked key's events).
	st := &d.orderedState
	if len(events) == 0 && (st.clogged.Load() || time.Since(time.Unix(0, st.fullAt.Load())) >= orderedFullEvery) {
		st.fullAt.Store(time.Now().UnixNano())
		if events, err = claimWith(full, false); err != nil {
			return driver.Claim{}, err
		}
		st.clogged.Store(len(events) > 0)
	} else if len(events) > 0 {
		st.clogged.Store(false)
	}
	claim := driver.Claim{Events: events}
	if len(events) > 0 {
		claim.LockedUntil = events[0].LockedUntil
		return claim, nil
	}
	// Nothing to publish: ask whether the horizon held events back, so
	// that the relay claims again within milliseconds instead of at its
	// poll (the older transaction's end wakes nobody when it wrote no
	// event). A hint: if asking fails, the claim still succeeded.
	if err := d.pool.QueryRow(ctx, q.held, horizon).Scan(&claim.Held); err != nil {
		claim.Held = false
	}
	return claim, nil
}

// BlockedAggregates lists aggregates held back by a failed first event.
func (d *Driver) BlockedAggregates(ctx context.Context, skip bool, limit int) ([]driver.BlockedAggregate, int64, error) {
	q := d.ordered[0]
	if skip {
		q = d.ordered[1]
	}
	var total int64
	if err := d.pool.QueryRow(ctx, q.blockedCount).Scan(&total); err != nil {
		return nil, 0, wrap(err)
	}
	if total == 0 || limit <= 0 {
		return nil, total, nil
	}
	rows, err := d.pool.Query(ctx, q.blocked, limit)
	if err != nil {
		return nil, 0, wrap(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (driver.BlockedAggregate, error) {
		var b driver.BlockedAggregate
		err := row.Scan(&b.AggregateType, &b.AggregateID, &b.HeadID, &b.HeadStatus, &b.Waiting)
		return b, err
	})
	return out, total, wrap(err)
}
