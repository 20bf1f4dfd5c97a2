package pgdriver

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/driver"
)

var _ driver.PartitionClaimer = (*Driver)(nil)

// partitionExpr is the partition of row a (an alias with its dot, or
// empty), spelled exactly as in the indexes of migration 8 so that the
// planner matches them.
func partitionExpr(a string) string {
	return `(hashtext(coalesce(` + a + `aggregate_type, '') || ':' || coalesce(` + a + `aggregate_id, ` + a + `id::text)) & ` +
		strconv.Itoa(driver.Partitions-1) + `)`
}

// partitionQueries are the statements of ordered delivery by owned
// partitions (docs/ordering.md).
type partitionQueries struct {
	read                                  [3]string // block, skip, unordered
	readRecord                            [3]string // the same, recording the batch in flight
	balance, release                      string
	markProcessed, markDeleted, markArchv string
	markFailed                            string
	// From migration 10 (driver.InFlightVersion), on
	// outbox_partition_in_flight (a read's record is written by
	// readRecord): its clearing by a release of the batch, the balance
	// round that hands it to the rescue of a takeover, and a restarted
	// relay's adoption of its own.
	clearInFlight                   string
	balanceInFlight, rescueInFlight string
	held                            string
	adoptInFlight                   string
}

// The partition reads, by the policy they keep (partitionQueries.read).
const (
	readBlock     = iota // ordered, a dead event holds its key's later ones
	readSkip             // ordered, a dead event does not
	readUnordered        // no order: PartitionClaimParams.Unordered
)

// heldAge is how far back an empty partition read looks for committed
// events its horizon left out: such events were written moments ago,
// and the pending index still holds, until a vacuum, an entry for every
// event processed since, which the probe steps over.
const heldAge = 5 * time.Second

// heldQuery asks whether an ordered read that found no event left
// committed events out for its horizon: pending, due and written within
// heldAge (a range of available_at, in outbox_events_pending_idx or, from
// migration 12, in the partition index), with a transaction ID at or above
// horizon, and cond.
func heldQuery(t, horizon, cond string) string {
	return `SELECT EXISTS (SELECT FROM ` + t + ` e
    WHERE e.status = 'pending' AND e.available_at <= now()
      AND e.available_at > now() - ` + strconv.Itoa(int(heldAge.Milliseconds())) + ` * interval '1 millisecond'
      AND e.txid >= ` + horizon + cond + `)`
}

func buildPartitionQueries(schema, t string) partitionQueries {
	var q partitionQueries
	parts := pgx.Identifier{schema, "outbox_partitions"}.Sanitize()
	relays := pgx.Identifier{schema, "outbox_partition_relays"}.Sanitize()
	pe := partitionExpr("e.")

	// The read writes no event (readRecord writes its in-flight record).
	// parts: the partitions this relay owns with more than $3 ms of lease
	// left and no batch of its own in flight ($4), rotated by $5.
	// blockers: the events of those partitions in flight under a row lease
	// (the small partial index of processing rows).
	// Then, partition by partition in that order, its pending due events
	// below the horizon in key order, leaving out every event with a
	// blocker of its key before it, every event with one of its key before
	// it that is pending and not due (retrying, or written for later: a
	// probe of outbox_events_key_delayed_idx per event, migration 11, so
	// that the events scheduled ahead are never read whole), and under
	// block every event with a dead one of its key before it (a probe of
	// outbox_events_dead_key_idx per event, so that the dead-letter queue
	// is never read whole), up to $7 from each partition and $1 in all.
	// (A small $7 takes a batch from many partitions: the oldest events of
	// each, which lie close together in the table, so the read and the
	// mark touch far fewer pages than the events of one partition, spread
	// over the whole table, would.) The columns come straight
	// from the partition scan's heap fetch (no join back by primary key:
	// one index probe per event less).
	// The read of a relay that keeps no order (readUnordered) takes each
	// partition's pending due events in the same order with none of those
	// conditions: no horizon, no key held back.
	// What of it goes (going): all of it unless a suspect (an event in
	// flight when a relay holding it died) is in it or its stored bytes
	// (pg_column_size, as the other claims count them) pass $6 > 0 (cut);
	// then, in key order (txid, id), which any prefix keeps for every key,
	// the first event always and the next ones while no suspect has come
	// and the bytes stay within $6 (kept). A suspect therefore goes alone,
	// or is left for the next read behind the events before it.
	// The read returns its events, each with the horizon it read below and
	// whether the cut applied, or, when it has none, one row of NULLs with
	// the horizon; held then asks whether the horizon left committed events
	// of the relay's partitions out ($1 the horizon; $2 relay, $3 busy
	// partitions, as the read): pending, due and written within heldAge (a
	// range of available_at, in outbox_events_pending_idx or, from
	// migration 12, in the partition index), where an event whose
	// transaction ended while an older one still ran is found.
	q.held = heldQuery(t, `$1::bigint::text::xid8`, `
      AND `+pe+` IN (SELECT partition FROM `+parts+`
                          WHERE owner = $2 AND lease_until > now() AND partition <> ALL($3::int[]))`)
	inFlight := pgx.Identifier{schema, "outbox_partition_in_flight"}.Sanitize()
	read := func(policy int, record bool) string {
		dead := `
      AND NOT EXISTS (SELECT FROM ` + t + ` d
                      WHERE ` + keyMatch("d", "e") + `
                        AND d.status = 'failed' AND d.aggregate_id IS NOT NULL
                        AND (d.txid, d.id) < (e.txid, e.id)
                        AND d.dead_letter_retries <> ` + strconv.Itoa(driver.DiscardedRetries) + `)`
		// The read of an ordered relay leaves out the events behind
		// an earlier one of their key (keyed), and those of transactions
		// that ended while an older one still ran (below the horizon).
		keyed := `
      AND e.txid < (SELECT x FROM horizon)
      AND NOT EXISTS (SELECT FROM blockers b
                      WHERE b.aggregate_id = e.aggregate_id
                        AND coalesce(b.aggregate_type, '') = coalesce(e.aggregate_type, '')
                        AND (b.txid, b.id) < (e.txid, e.id))
      AND NOT EXISTS (SELECT FROM ` + t + ` w
                      WHERE ` + keyMatch("w", "e") + `
                        AND w.status = 'pending' AND w.aggregate_id IS NOT NULL
                        AND w.available_at > w.created_at AND w.available_at > now()
                        AND (w.txid, w.id) < (e.txid, e.id))`
		switch policy {
		case readSkip:
			dead = ``
		case readUnordered:
			keyed, dead = ``, ``
		}
		cols := strings.ReplaceAll(claimColumns, "e.locked_until", "p.lease_until")
		// With record (migration 10), the read also writes the batch's
		// in-flight record in the same statement, before its events go
		// out: per partition, the IDs of what goes from it (goes, grouped
		// once for both the lock and the record), the relay and fence it
		// read under and the database clock. held first locks the
		// batch's partition rows whose lease and fence still hold (FOR KEY
		// SHARE, in partition order: marks and renewals go on, but a
		// takeover skips them until the record is committed, and so sees
		// it); the record's rows are locked next, in partition order, as
		// every writer of the table locks them (the Sort under that lock
		// takes all of held first). A record under a newer fence is kept.
		// Only the events of the partitions recorded are returned: a
		// partition lost meanwhile goes to its new owner unsent.
		going := `(NOT (SELECT needed FROM cut) OR g.id IN (SELECT id FROM kept))`
		recordCTE, out := ``, `batch g WHERE `+going
		if record {
			recordCTE = `, goes AS MATERIALIZED (
    SELECT partition, fence, array_agg(id) AS ids FROM batch g WHERE ` + going + ` GROUP BY partition, fence
), held AS MATERIALIZED (
    SELECT p.partition, p.fence FROM ` + parts + ` p
    WHERE p.owner = $2 AND p.lease_until > now()
      AND (p.partition, p.fence) IN (SELECT partition, fence FROM goes)
    ORDER BY p.partition
    FOR KEY SHARE OF p
), recorded AS (
    UPDATE ` + inFlight + ` AS r SET owner = $2, fence = x.fence, ids = x.ids, recorded_at = now()
    FROM (SELECT q.partition, b.fence, b.ids FROM ` + inFlight + ` q
          JOIN held h ON h.partition = q.partition
          JOIN goes b ON b.partition = q.partition AND b.fence = h.fence
          WHERE q.fence IS NULL OR q.fence <= b.fence
          ORDER BY q.partition
          FOR UPDATE OF q) x
    WHERE r.partition = x.partition
    RETURNING r.partition
)`
			out += ` AND g.partition IN (SELECT partition FROM recorded)`
		}
		return `WITH horizon AS MATERIALIZED (
    SELECT pg_snapshot_xmin(pg_current_snapshot()) AS x
), parts AS MATERIALIZED (
    SELECT partition, fence, lease_until FROM ` + parts + `
    WHERE owner = $2 AND lease_until > now() + $3::bigint * interval '1 millisecond'
      AND partition <> ALL($4::int[])
    ORDER BY (partition + $5::int) % ` + strconv.Itoa(driver.Partitions) + `
), blockers AS MATERIALIZED (
    SELECT b.aggregate_type, b.aggregate_id, b.txid, b.id
    FROM parts p JOIN ` + t + ` b ON ` + partitionExpr("b.") + ` = p.partition
    WHERE b.aggregate_id IS NOT NULL AND b.txid < (SELECT x FROM horizon) AND b.status = 'processing'
), batch AS MATERIALIZED (
SELECT c.* FROM parts p CROSS JOIN LATERAL (
    SELECT ` + cols + `, e.txid::text::bigint AS txid, p.partition, p.fence, now(),
           pg_column_size(e.payload) + pg_column_size(e.headers) AS size
    FROM ` + t + ` e
    WHERE ` + pe + ` = p.partition AND e.status = 'pending' AND e.available_at <= now()` + keyed + dead + `
    ORDER BY e.txid, e.id
    LIMIT $7
) c
LIMIT $1
), cut AS MATERIALIZED (
    SELECT coalesce(bool_or(lease_expiries > 0), false)
           OR ($6::bigint > 0 AND coalesce(sum(size), 0) > $6::bigint) AS needed
    FROM batch
), kept AS MATERIALIZED (
    SELECT id FROM (
        SELECT id, row_number() OVER w AS n,
               count(*) FILTER (WHERE lease_expiries > 0) OVER w AS suspects,
               sum(size) OVER w AS bytes
        FROM batch WINDOW w AS (ORDER BY txid, id)) k
    WHERE n = 1 OR (suspects = 0 AND ($6::bigint <= 0 OR bytes <= $6::bigint))
)` + recordCTE + `
SELECT g.*, (SELECT x FROM horizon)::text::bigint AS horizon, (SELECT needed FROM cut) AS cut
FROM (SELECT) one LEFT JOIN (SELECT * FROM ` + out + `) g ON true`
	}
	for policy := range q.read {
		q.read[policy], q.readRecord[policy] = read(policy, false), read(policy, true)
	}

	// The partitions a mark may still write in: those of the batch whose
	// fence holds ($R relay, $P partitions, $F fences), share-locked in
	// partition order until the mark commits, so that a relay taking one
	// over waits for the mark (and sees it) and no two lockers deadlock.
	ok := func(r, p, f string) string {
		return `(SELECT p.partition FROM ` + parts + ` p
      JOIN unnest(` + p + `::int[], ` + f + `::bigint[]) AS f(partition, fence) ON f.partition = p.partition
      WHERE p.owner = ` + r + ` AND p.fence = f.fence AND p.lease_until > now()
      ORDER BY p.partition
      FOR SHARE OF p) ok`
	}
	// The marks find their rows by ID (the primary key): "+ 0" keeps the
	// planner off outbox_events_partition_idx, which would read every
	// pending event of the partition to find the batch's.
	inOK := pe + ` + 0 = ok.partition`
	fenced := `e.id = ANY($1::bigint[]) AND e.status = 'pending' AND ` + inOK
	q.markProcessed = `UPDATE ` + t + ` AS e
SET status = 'processed', processed_at = now(), updated_at = now(), locked_by = $2
FROM ` + ok("$2", "$3", "$4") + `
WHERE ` + fenced
	q.markDeleted = `DELETE FROM ` + t + ` AS e USING ` + ok("$2", "$3", "$4") + ` WHERE ` + fenced
	archive := strings.TrimSuffix(t, `"`) + `_archive"`
	q.markArchv = `WITH moved AS (
    DELETE FROM ` + t + ` AS e USING ` + ok("$2", "$3", "$4") + ` WHERE ` + fenced + `
    RETURNING e.id, e.event_type, e.aggregate_type, e.aggregate_id, e.payload, e.headers, e.idempotency_key,
              e.attempts, e.max_attempts, e.last_error, e.available_at, e.created_at
), archived AS (
    INSERT INTO ` + archive + ` (id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
        status, attempts, max_attempts, last_error, available_at, locked_by, created_at, updated_at, processed_at)
    SELECT id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
        'processed', attempts, max_attempts, last_error, available_at, $2, created_at, now(), now()
    FROM moved
    ON CONFLICT DO NOTHING
)
SELECT count(*) FROM moved`
	q.markFailed = `UPDATE ` + t + ` AS e
SET ` + failureSet("$5") + `
    locked_by = $6,
    updated_at = now()
FROM unnest($1::bigint[], $2::text[], $3::boolean[], $4::bigint[]) AS f(id, error, permanent, delay_ms),
     ` + ok("$6", "$7", "$8") + `
WHERE e.id = f.id AND e.status = 'pending' AND ` + inOK + `
RETURNING e.id, e.status`

	q.balance = balanceSQL(parts, relays, "")
	q.balanceInFlight = balanceSQL(parts, relays, inFlight)

	q.release = `WITH gone AS (
    DELETE FROM ` + relays + ` WHERE relay_id = $1
)
UPDATE ` + parts + ` SET owner = NULL, lease_until = NULL WHERE owner = $1`

	// A release's clearing of the record ($1 relay, $2 and $3 the batch's
	// partitions and fences): the events it hands back were not sent. Only
	// the relay's own record under that fence is cleared; the rows are
	// locked in partition order, as every writer of the table locks them.
	q.clearInFlight = `UPDATE ` + inFlight + ` AS r SET ids = NULL
FROM (SELECT q.partition, o.fence FROM ` + inFlight + ` q
      JOIN unnest($2::int[], $3::bigint[]) AS o(partition, fence) ON o.partition = q.partition
      ORDER BY q.partition
      FOR UPDATE OF q) x
WHERE r.partition = x.partition AND r.owner = $1 AND r.fence = x.fence AND r.ids IS NOT NULL`
	// A relay's first round after it started: its own partitions whose
	// record carries their current fence were held, under the same relay
	// ID, by a process that died (relay IDs are unique among running
	// relays, and a relay that stops gracefully gives its partitions up).
	// They are taken over as an orphan is, before the round: the fence goes
	// up (the dead process's marks no longer hold, and the record is not
	// counted again), and the record is returned for the rescue.
	q.adoptInFlight = `WITH adopted AS (
    UPDATE ` + parts + ` AS p SET fence = p.fence + 1
    FROM (SELECT q.partition, r.ids, r.recorded_at FROM ` + parts + ` q
          JOIN ` + inFlight + ` r ON r.partition = q.partition AND r.owner = q.owner AND r.fence = q.fence
          WHERE q.owner = $1 AND r.ids IS NOT NULL
          ORDER BY q.partition
          FOR UPDATE OF q) o
    WHERE p.partition = o.partition
    RETURNING o.ids, o.recorded_at
), carried AS MATERIALIZED (
    SELECT i.id, a.recorded_at FROM adopted a CROSS JOIN unnest(a.ids) AS i(id)
)
SELECT coalesce((SELECT array_agg(id ORDER BY id) FROM carried), '{}'),
       coalesce((SELECT array_agg(recorded_at ORDER BY id) FROM carried), '{}')`
	// What a takeover rescues ($1 IDs, $2 their previous owner, $3 when
	// they were recorded; $4 MaxAttempts): the events still pending and
	// unchanged since (a failed publish, a retry or a replay changed them),
	// locked for the rescue's update, with the columns driver.Expired reads.
	q.rescueInFlight = `SELECT e.id, e.attempts, e.lease_expiries, coalesce(e.max_attempts, $4), coalesce(e.last_error, ''), f.previous
FROM unnest($1::bigint[], $2::text[], $3::timestamptz[]) AS f(id, previous, recorded_at)
JOIN ` + t + ` e ON e.id = f.id
WHERE e.status = 'pending' AND e.updated_at <= f.recorded_at
ORDER BY e.id
FOR UPDATE OF e`
	return q
}

// balanceSQL is a balance round, one statement: upsert the relay ($1) into
// the share-out with an expiry of a lease ($2 ms) and forget relays gone
// for an hour; target = ceil(partitions / live relays). mine: the relay's
// partitions with lease left, locked in partition order (as the marks lock
// them; FOR NO KEY UPDATE, which waits for the marks' FOR SHARE but not for
// a recording read's FOR KEY SHARE), the busy ones ($3) first: those above the target and not busy are
// released, the others renewed unless stuck ($4); below the target it
// takes free partitions, and whatever the target it takes the partitions
// whose owner's lease ran out (a relay that died: no stall until the
// share-out settles; one above the target releases the extra ones at its
// next round), each with the fence raised, skipping any a mark or another
// relay holds and its own busy ones (stuck in a publish: another relay
// takes them). It returns the partitions held after the round and the live
// relays. With inFlight, the table of in-flight records (migration 10), the
// round also returns, for the rescue, the events recorded in flight on the
// partitions whose owner's lease ran out, under the owner and fence it held
// them with, with that owner and when they were recorded (the records
// share-locked in partition order after the partitions: a record committed
// since the statement began is seen, and a read still recording holds its
// partitions, which the round then skips).
func balanceSQL(parts, relays, inFlight string) string {
	n := strconv.Itoa(driver.Partitions)
	lease := `now() + $2::bigint * interval '1 millisecond'`
	acquire := `owner = $1, fence = p.fence + 1, lease_until = ` + lease
	// The partitions whose owner's lease ran out, with that owner and the
	// fence it held them under.
	orphans := `orphans AS (
    UPDATE ` + parts + ` AS p SET ` + acquire + `
    FROM (SELECT f.partition, f.owner, f.fence FROM ` + parts + ` f
          WHERE f.owner IS NOT NULL AND f.lease_until <= now() AND f.partition <> ALL($3::int[])
          ORDER BY f.partition
          FOR UPDATE SKIP LOCKED) o
    WHERE p.partition = o.partition
    RETURNING p.partition, o.owner AS previous, o.fence AS read_fence
)`
	rescued := ``
	if inFlight != "" {
		orphans += `, carried AS MATERIALIZED (
    SELECT i.id, c.previous, c.recorded_at FROM (
        SELECT o.previous, r.ids, r.recorded_at FROM orphans o
        JOIN ` + inFlight + ` r ON r.partition = o.partition AND r.owner = o.previous AND r.fence = o.read_fence
        ORDER BY r.partition
        FOR SHARE OF r) c
    CROSS JOIN unnest(c.ids) AS i(id)
)`
		rescued = `,
       coalesce((SELECT array_agg(id ORDER BY id) FROM carried), '{}'),
       coalesce((SELECT array_agg(previous ORDER BY id) FROM carried), '{}'),
       coalesce((SELECT array_agg(recorded_at ORDER BY id) FROM carried), '{}')`
	}
	return `WITH me AS (
    INSERT INTO ` + relays + ` (relay_id, expires_at) VALUES ($1, ` + lease + `)
    ON CONFLICT (relay_id) DO UPDATE SET expires_at = excluded.expires_at
    RETURNING relay_id
), gone AS (
    DELETE FROM ` + relays + ` WHERE expires_at < now() - interval '1 hour'
), live AS MATERIALIZED (
    SELECT count(*) + 1 AS n FROM ` + relays + ` WHERE expires_at > now() AND relay_id <> $1
), target AS MATERIALIZED (
    SELECT (` + n + ` + n - 1) / n AS t FROM live
), locked AS MATERIALIZED (
    SELECT partition FROM ` + parts + `
    WHERE owner = $1 AND lease_until > now()
    ORDER BY partition
    FOR NO KEY UPDATE
), mine AS MATERIALIZED (
    SELECT partition, partition = ANY($3::int[]) AS busy,
           row_number() OVER (ORDER BY partition = ANY($3::int[]) DESC, partition) AS k
    FROM locked
), released AS (
    UPDATE ` + parts + ` AS p SET owner = NULL, lease_until = NULL
    FROM mine m
    WHERE p.partition = m.partition AND m.k > (SELECT t FROM target) AND NOT m.busy
    RETURNING p.partition
), renewed AS (
    UPDATE ` + parts + ` AS p SET lease_until = ` + lease + `
    FROM mine m
    WHERE p.partition = m.partition AND (m.k <= (SELECT t FROM target) OR m.busy)
      AND p.partition <> ALL($4::int[])
    RETURNING p.partition
), acquired AS (
    UPDATE ` + parts + ` AS p SET ` + acquire + `
    WHERE p.partition = ANY(ARRAY(
        SELECT f.partition FROM ` + parts + ` f
        WHERE f.owner IS NULL AND f.partition <> ALL($3::int[])
        ORDER BY f.partition
        LIMIT greatest((SELECT t FROM target) - (SELECT count(*) FROM mine), 0)
        FOR UPDATE SKIP LOCKED))
    RETURNING p.partition
), ` + orphans + `
SELECT (SELECT count(*) FROM mine) - (SELECT count(*) FROM released) + (SELECT count(*) FROM acquired)
       + (SELECT count(*) FROM orphans) + 0 * (SELECT count(*) FROM renewed) + 0 * (SELECT count(*) FROM me),
       (SELECT n FROM live)` + rescued
}

// ReadPartitions reads a batch from the partitions the relay owns.
func (d *Driver) ReadPartitions(ctx context.Context, p driver.PartitionClaimParams) (driver.Claim, error) {
	reads := d.parts.read
	if p.RecordInFlight {
		reads = d.parts.readRecord
	}
	q := reads[readBlock]
	switch {
	case p.Unordered:
		q = reads[readUnordered]
	case p.Skip:
		q = reads[readSkip]
	}
	busy := p.Busy
	if busy == nil {
		busy = []int32{}
	}
	perPart := p.PerPartition
	if perPart <= 0 || perPart > p.BatchSize {
		perPart = p.BatchSize
	}
	rows, err := d.pool.Query(ctx, q, p.BatchSize, p.RelayID, p.MinLease.Milliseconds(), busy, p.Offset%driver.Partitions,
		p.MaxBytes, perPart)
	if err != nil {
		return driver.Claim{}, wrap(err)
	}
	defer rows.Close()
	type keyed struct {
		txid int64
		ev   driver.Event
	}
	var (
		out     []keyed
		txid    int64
		part    int32
		fence   int64
		dbNow   time.Time
		size    int64 // the byte budget's measure, applied by the read
		horizon int64 // the read's, on every row
		claim   driver.Claim
		count   = map[int32]int{} // events read per partition
	)
	sc := newClaimScanner(&txid, &part, &fence, &dbNow, &size, &horizon, &claim.Cut)
	var none []any // the row of a read without events: its horizon alone
	for rows.Next() {
		if rows.RawValues()[0] == nil {
			none = make([]any, len(sc.dest))
			none[len(none)-2] = &horizon
			if err := rows.Scan(none...); err != nil {
				return driver.Claim{}, wrap(err)
			}
			continue
		}
		ev, err := sc.scan(rows, p.RelayID)
		if err != nil {
			return driver.Claim{}, wrap(err)
		}
		out = append(out, keyed{txid: txid, ev: ev})
		if count[part]++; count[part] == 1 { // the partition's first event
			claim.Parts = append(claim.Parts, part)
			claim.Fences = append(claim.Fences, fence)
		}
		if count[part] == perPart && perPart < p.BatchSize {
			claim.Capped = append(claim.Capped, part)
		}
		if claim.LockedUntil.IsZero() || ev.LockedUntil.Before(claim.LockedUntil) {
			claim.LockedUntil = ev.LockedUntil
		}
	}
	if err := rows.Err(); err != nil {
		return driver.Claim{}, wrap(err)
	}
	if len(out) == 0 {
		if p.Unordered {
			return claim, nil // no horizon
		}
		// Nothing to publish: ask whether the horizon held events back. The
		// answer is a hint: if asking fails, the read still succeeded, and
		// the relay reads again at its usual pace.
		if err := d.pool.QueryRow(ctx, d.parts.held, horizon, p.RelayID, busy).Scan(&claim.Held); err != nil {
			claim.Held = false
		}
		return claim, nil
	}
	// Key order is (txid, id): sorting the batch by it keeps every key's
	// events in order.
	slices.SortFunc(out, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(a.txid, b.txid), cmp.Compare(a.ev.ID, b.ev.ID))
	})
	claim.Events = make([]driver.Event, len(out))
	for i := range out {
		claim.Events[i] = out[i].ev
		claim.Events[i].LockedUntil = claim.LockedUntil
	}
	claim.Lease = claim.LockedUntil.Sub(dbNow)
	claim.InFlight = p.RecordInFlight
	return claim, nil
}

// BalancePartitions runs one balance round of the relay's partitions; with
// RescueInFlight, in one transaction with the rescue of what was in flight
// on the partitions it took over.
func (d *Driver) BalancePartitions(ctx context.Context, p driver.BalanceParams) (driver.BalanceResult, error) {
	busy, stuck := p.Busy, p.Stuck
	if busy == nil {
		busy = []int32{}
	}
	if stuck == nil {
		stuck = []int32{}
	}
	var res driver.BalanceResult
	if !p.RescueInFlight {
		err := d.pool.QueryRow(ctx, d.parts.balance, p.RelayID, p.Lease.Milliseconds(), busy, stuck).Scan(&res.Held, &res.Relays)
		return res, wrap(err)
	}
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		res = driver.BalanceResult{}
		var (
			ids      []int64
			previous []string
			recorded []time.Time
		)
		if p.Restart {
			if err := tx.QueryRow(ctx, d.parts.adoptInFlight, p.RelayID).Scan(&ids, &recorded); err != nil {
				return err
			}
			previous = slices.Repeat([]string{p.RelayID}, len(ids))
		}
		var (
			more         []int64
			morePrevious []string
			moreRecorded []time.Time
		)
		if err := tx.QueryRow(ctx, d.parts.balanceInFlight, p.RelayID, p.Lease.Milliseconds(), busy, stuck).
			Scan(&res.Held, &res.Relays, &more, &morePrevious, &moreRecorded); err != nil {
			return err
		}
		ids, previous, recorded = append(ids, more...), append(previous, morePrevious...), append(recorded, moreRecorded...)
		if len(ids) == 0 {
			return nil
		}
		var err error
		res.Rescue, err = d.rescueRows(ctx, tx, d.parts.rescueInFlight, ids, previous, recorded, p.MaxAttempts)
		return err
	})
	if err != nil {
		return driver.BalanceResult{}, wrap(err)
	}
	return res, nil
}

// ReleasePartitions gives up the relay's partitions. Their in-flight
// records stay, but no longer count once the next owner acquires them and
// raises their fences.
func (d *Driver) ReleasePartitions(ctx context.Context, relayID string) error {
	_, err := d.pool.Exec(ctx, d.parts.release, relayID)
	return wrap(err)
}

// markPartitioned is MarkProcessed under a partition fence.
func (d *Driver) markPartitioned(ctx context.Context, f driver.Fence, ids []int64, retention driver.Retention) (int64, error) {
	switch retention {
	case driver.RetainDelete:
		tag, err := d.pool.Exec(ctx, d.parts.markDeleted, ids, f.RelayID, f.Parts, f.Fences)
		return tag.RowsAffected(), wrap(err)
	case driver.RetainArchive:
		var n int64
		err := d.pool.QueryRow(ctx, d.parts.markArchv, ids, f.RelayID, f.Parts, f.Fences).Scan(&n)
		return n, wrap(err)
	}
	tag, err := d.pool.Exec(ctx, d.parts.markProcessed, ids, f.RelayID, f.Parts, f.Fences)
	return tag.RowsAffected(), wrap(err)
}
