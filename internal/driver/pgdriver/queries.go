package pgdriver

import "strings"

// queries holds every relay and operator statement for one table, built once.
type queries struct {
	claim, claimFiltered                           string
	claimBudget, claimFilteredBudget               string
	claimCapture, claimCaptureFiltered             string
	markProcessed, markFailed, release             string
	rescueSelect, rescue                           string
	markDeleted, markArchived, purgeArchive        string
	stats, estimateStats, get, requeue, listPrefix string
	requeueStatus, purge                           map[string]string // by status
}

// eventColumns is the column list scanned by scanEvent; prefix is a table
// alias with its dot, or empty.
func eventColumns(prefix string) string {
	cols := []string{
		"id", "event_type", "coalesce(%aggregate_type, '')", "coalesce(%aggregate_id, '')",
		"payload", "headers", "coalesce(%idempotency_key, '')", "status", "attempts",
		"coalesce(%max_attempts, 0)", "coalesce(%last_error, '')", "available_at",
		"locked_until", "coalesce(%locked_by, '')", "created_at", "updated_at", "processed_at", "lease_expiries",
	}
	for i, c := range cols {
		if strings.Contains(c, "%") {
			cols[i] = strings.ReplaceAll(c, "%", prefix)
		} else {
			cols[i] = prefix + c
		}
	}
	return strings.Join(cols, ", ")
}

// claimColumns is what a claim returns: what a sink needs, the lease and
// the lease expiries (the relay publishes a suspect with nothing else in
// flight), nothing the relay already knows (status, locked_by) or does not
// use. A claim returns every row it leases, so each column costs at full
// rate.
const claimColumns = `e.id, e.event_type, coalesce(e.aggregate_type, ''), coalesce(e.aggregate_id, ''), e.payload,
    e.headers, coalesce(e.idempotency_key, ''), e.attempts, coalesce(e.max_attempts, 0), e.available_at,
    e.locked_until, e.created_at, e.lease_expiries`

func buildQueries(t string) queries {
	var q queries

	// The claim locks due rows in a MATERIALIZED CTE, then updates exactly
	// those. A CTE (not `id IN (SELECT … LIMIT n)`) can never lock more rows
	// than the limit, and materializing it keeps the planner on the
	// outbox_events_pending_idx range scan even under a generic plan.
	// SKIP LOCKED lets any number of relays claim disjoint batches.
	//
	// A suspect (an event with a lease expiry on record: its relay died
	// holding it) is claimed alone: when the locked rows hold one, the
	// first in claim order is the whole claim, and the others stay pending
	// for the next claim. The test is one scan of the CTE's rows in memory
	// (an InitPlan, run once); the index scan and the join are as before.
	claim := func(filter string) string {
		return `WITH due AS MATERIALIZED (
    SELECT id, available_at, lease_expiries FROM ` + t + `
    WHERE status = 'pending' AND available_at <= now()` + filter + `
    ORDER BY available_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE ` + t + ` AS e
SET status = 'processing', locked_by = $2,
    locked_until = now() + $3::bigint * interval '1 millisecond', updated_at = now()
FROM due
WHERE e.id = due.id
  AND due.id = coalesce((SELECT s.id FROM due s WHERE s.lease_expiries > 0 ORDER BY s.available_at, s.id LIMIT 1), due.id)
RETURNING ` + claimColumns
	}
	q.claim = claim("")
	// A relay serving some event types filters in the claim itself, so it
	// never leases (and never delays) events meant for another relay.
	const typeFilter = "\n      AND event_type LIKE ANY($4::text[])"
	q.claimFiltered = claim(typeFilter)
	// The table path of a capture relay (driver.ClaimParams.CaptureSlot)
	// takes what the stream leaves to it: the negation of captureStreamed,
	// and, as a safety net, the stream's rows it missed (captureMissed).
	// The rows it skips are the stream's backlog, which can be large (a
	// burst, a slow sink): without a bound the scan would read every one
	// of them on every poll. So it looks only at the first $5 due pending
	// rows in claim order (captureClaimWindow), the window's last key
	// found by an index-only range scan of outbox_events_pending_idx (an
	// InitPlan; the sentinel row makes it "no bound" when fewer rows are
	// pending) and used as a row comparison, which is an index condition
	// of the claim's own range scan. What the table path owns behind the
	// window (a retry or a delayed event due after more unsettled stream
	// rows than the window holds) waits until the stream has settled them
	// or, for the safety net, until they count as missed: the window moves
	// as the stream advances, and the oldest rows, where a missed row
	// sorts, are always in it.
	capture := strings.TrimSuffix(t, `outbox_events"`) + `outbox_capture"`
	// With event types (a capture relay serving some types) the window is
	// of those types' rows only: rows of other types, left pending for
	// their own relays, must not fill it while those relays are down. The
	// window's scan then reads past the other types' rows, as a poll
	// relay's claim with event types does.
	captureClaim := func(filter, windowFilter string) string {
		return claim(filter + `
      AND (available_at, id) <= (
          SELECT b.available_at, b.id FROM (
              (SELECT 0 AS k, w.available_at, w.id FROM ` + t + ` w
               WHERE w.status = 'pending' AND w.available_at <= now()` + windowFilter + `
               ORDER BY w.available_at, w.id OFFSET $5 - 1 LIMIT 1)
              UNION ALL SELECT 1, 'infinity', 9223372036854775807
          ) b ORDER BY b.k LIMIT 1)
      AND (NOT (` + captureStreamed(capture, "", "$4") + `) OR ` + captureMissed("", "$4") + ")")
	}
	q.claimCapture = captureClaim("", "")
	q.claimCaptureFiltered = captureClaim("\n      AND event_type LIKE ANY($6::text[])", " AND w.event_type LIKE ANY($6::text[])")

	// With a byte budget (RelayConfig.MaxBatchBytes) the claim takes the
	// locked rows in claim order while their running total of stored bytes
	// stays within the budget, the first row always; a suspect is still
	// claimed alone. pg_column_size reads the stored size (compressed, for
	// a large TOASTed value) without detoasting anything. A variant of its
	// own, so that the claim without a budget keeps its plan.
	claimBudget := func(filter, budget string) string {
		return `WITH due AS MATERIALIZED (
    SELECT id, available_at, lease_expiries, pg_column_size(payload) + pg_column_size(headers) AS size FROM ` + t + `
    WHERE status = 'pending' AND available_at <= now()` + filter + `
    ORDER BY available_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), suspect AS MATERIALIZED (
    SELECT id FROM due WHERE lease_expiries > 0 ORDER BY available_at, id LIMIT 1
), pick AS MATERIALIZED (
    SELECT id FROM suspect
    UNION ALL
    SELECT id FROM (
        SELECT id, row_number() OVER w AS n, sum(size) OVER w AS total
        FROM due
        WINDOW w AS (ORDER BY available_at, id)
    ) fit
    WHERE (n = 1 OR total <= ` + budget + `::bigint) AND NOT EXISTS (SELECT FROM suspect)
)
UPDATE ` + t + ` AS e
SET status = 'processing', locked_by = $2,
    locked_until = now() + $3::bigint * interval '1 millisecond', updated_at = now()
FROM pick
WHERE e.id = pick.id
RETURNING ` + claimColumns
	}
	q.claimBudget = claimBudget("", "$4")
	q.claimFilteredBudget = claimBudget(typeFilter, "$5")

	// Marks are fenced on the lease they were claimed under: a relay whose
	// lease expired and whose rows were re-claimed changes nothing.
	// locked_by stays as a record of which relay handled the event last.
	q.markProcessed = `UPDATE ` + t + `
SET status = 'processed', processed_at = now(), updated_at = now(), locked_until = NULL
WHERE id = ANY($1::bigint[]) AND status = 'processing' AND locked_by = $2 AND locked_until = $3`

	// Retention "delete": the fenced rows go once the sink acknowledged them,
	// so the hot table never grows with history.
	fence := `id = ANY($1::bigint[]) AND status = 'processing' AND locked_by = $2 AND locked_until = $3`
	q.markDeleted = `DELETE FROM ` + t + ` WHERE ` + fence
	// Retention "archive": move the fenced rows to the archive table in one
	// statement, which counts the rows it moved. An ID already archived
	// (the identity restarted by TRUNCATE … RESTART IDENTITY, an explicit
	// ID) keeps its archived row: a conflict must not fail the mark of
	// the whole batch, every time, while the events are re-sent forever.
	archive := strings.TrimSuffix(t, `"`) + `_archive"`
	q.markArchived = `WITH moved AS (
    DELETE FROM ` + t + ` WHERE ` + fence + `
    RETURNING id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
              attempts, max_attempts, last_error, available_at, locked_by, created_at
), archived AS (
    INSERT INTO ` + archive + ` (id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
        status, attempts, max_attempts, last_error, available_at, locked_by, created_at, updated_at, processed_at)
    SELECT id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
        'processed', attempts, max_attempts, last_error, available_at, locked_by, created_at, now(), now()
    FROM moved
    ON CONFLICT DO NOTHING
)
SELECT count(*) FROM moved`
	// The outer processed_at condition lets a partitioned archive prune to
	// the partitions that straddle the cutoff (the ones wholly before it
	// are dropped, not purged row by row).
	q.purgeArchive = `DELETE FROM ` + archive + `
WHERE processed_at < now() - $1::bigint * interval '1 millisecond' AND id = ANY(ARRAY(
    SELECT id FROM ` + archive + `
    WHERE processed_at < now() - $1::bigint * interval '1 millisecond'
    ORDER BY processed_at
    LIMIT $2
))`

	// One statement for the whole batch's failures. Whether an event is dead
	// is decided here, from the row's own attempts and max_attempts, so an
	// operator's change to max_attempts during the publish still counts.
	q.markFailed = `UPDATE ` + t + ` AS e
SET ` + failureSet("$5") + `
    locked_until = NULL,
    updated_at = now()
FROM unnest($1::bigint[], $2::text[], $3::boolean[], $4::bigint[]) AS f(id, error, permanent, delay_ms)
WHERE e.id = f.id AND e.status = 'processing' AND e.locked_by = $6 AND e.locked_until = $7
RETURNING e.id, e.status`

	q.release = `UPDATE ` + t + `
SET status = 'pending', locked_until = NULL, updated_at = now()
WHERE id = ANY($1::bigint[]) AND status = 'processing' AND locked_by = $2 AND locked_until = $3`

	// The rescue reads and locks expired leases (outbox_events_processing_idx
	// only; SKIP LOCKED so it never waits on a relay that is marking the
	// same rows right now), decides each row's status and last error in Go
	// (driver.Expired), and writes them in one statement, in one
	// transaction.
	q.rescueSelect = `SELECT id, attempts, lease_expiries, coalesce(max_attempts, $2), coalesce(last_error, ''), coalesce(locked_by, '')
FROM ` + t + `
WHERE status = 'processing' AND locked_until < now()
ORDER BY locked_until
LIMIT $1
FOR UPDATE SKIP LOCKED`
	// The rescue returns the rows it dead-lettered, as they are after the
	// update, for the dead-letter hooks: no second round trip to read them.
	q.rescue = `WITH u AS (
    UPDATE ` + t + ` AS e
    SET status = r.status, attempts = e.attempts + 1, lease_expiries = e.lease_expiries + 1,
        last_error = r.error, locked_until = NULL, updated_at = now()
    FROM unnest($1::bigint[], $2::text[], $3::text[]) AS r(id, status, error)
    WHERE e.id = r.id
    RETURNING e.*
)
SELECT ` + eventColumns("") + ` FROM u WHERE status = 'failed' ORDER BY id`

	// pending, processing and failed are counted from their partial
	// indexes; the oldest due pending event is the first entry of
	// outbox_events_pending_idx.
	q.stats = `SELECT
    (SELECT count(*) FROM ` + t + ` WHERE status = 'pending'),
    (SELECT count(*) FROM ` + t + ` WHERE status = 'processing'),
    (SELECT count(*) FROM ` + t + ` WHERE status = 'processed'),
    (SELECT count(*) FROM ` + t + ` WHERE status = 'failed'),
    coalesce((SELECT extract(epoch FROM now() - available_at)::float8 FROM ` + t + `
        WHERE status = 'pending' AND available_at <= now()
        ORDER BY available_at, id LIMIT 1), 0)`

	// The planner's row estimate (kept by autovacuum and ANALYZE) stands in
	// for the processed count: an exact count would scan the whole history
	// on every metrics scrape. A table never analyzed has reltuples -1, and
	// one analyzed young lags behind its inserts: the statistics system's
	// live-row count (kept on every commit, lost on a crash restart) covers
	// both, so the larger of the two is taken.
	q.estimateStats = `SELECT
    (SELECT count(*) FROM ` + t + ` WHERE status = 'pending'),
    (SELECT count(*) FROM ` + t + ` WHERE status = 'processing'),
    (SELECT greatest(c.reltuples::bigint, pg_stat_get_live_tuples(c.oid), 0) FROM pg_class c WHERE c.oid = '` + strings.ReplaceAll(t, "'", "''") + `'::regclass),
    (SELECT count(*) FROM ` + t + ` WHERE status = 'failed'),
    coalesce((SELECT extract(epoch FROM now() - available_at)::float8 FROM ` + t + `
        WHERE status = 'pending' AND available_at <= now()
        ORDER BY available_at, id LIMIT 1), 0)`

	q.get = `SELECT ` + eventColumns("") + ` FROM ` + t + ` WHERE id = $1`
	q.listPrefix = `SELECT ` + eventColumns("") + ` FROM ` + t

	q.requeue = `UPDATE ` + t + `
` + requeueSet + `
WHERE id = ANY($1::bigint[]) AND status = ANY($2::text[])
RETURNING id`

	// Keyset over id so a long requeue of many events ends even while the
	// relay fails some of them again. The status is a literal, not a
	// parameter, so that a generic plan can still use the status's partial
	// index (outbox_events_failed_idx for failed).
	q.requeueStatus = map[string]string{}
	for _, status := range []string{"failed", "processed"} {
		q.requeueStatus[status] = `WITH sel AS MATERIALIZED (
    SELECT id FROM ` + t + `
    WHERE status = '` + status + `' AND id > $1
    ORDER BY id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE ` + t + ` AS e
` + requeueSet + `
FROM sel
WHERE e.id = sel.id
RETURNING e.id`
	}

	// Purge deletes one bounded batch per statement (short locks, short
	// transactions), oldest IDs first. `id = ANY(ARRAY(…))` bounds the batch
	// exactly, as the claim's CTE does; the literal status keeps the partial
	// index usable under a generic plan.
	purge := func(status, tsColumn string) string {
		return `DELETE FROM ` + t + `
WHERE id = ANY(ARRAY(
    SELECT id FROM ` + t + `
    WHERE status = '` + status + `' AND ` + tsColumn + ` < now() - $1::bigint * interval '1 millisecond'
    ORDER BY id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
))`
	}
	q.purge = map[string]string{
		"processed": purge("processed", "processed_at"),
		"failed":    purge("failed", "updated_at"),
	}
	return q
}

// requeueSet sends an event back to pending, due now, as an operator's
// retry or replay does: attempts and lease expiries reset, last error and
// any scheduled slow retry cleared (an event that then succeeds shows no
// stale error).
const requeueSet = `SET status = 'pending', attempts = 0, lease_expiries = 0, last_error = NULL, dead_letter_retry_at = NULL,
    available_at = now(), locked_until = NULL, processed_at = NULL, updated_at = now()`

// failureSet is the start of the SET list every failure mark shares: one
// more attempt, the error, and dead (failed) or pending again after the
// event's delay, decided from the row's own attempts and max_attempts (the
// relay's default in the parameter maxAttempts), so an operator's change to
// max_attempts during the publish still counts. f is the unnest of the
// batch's failures (id, error, permanent, delay_ms).
func failureSet(maxAttempts string) string {
	dead := `f.permanent OR e.attempts + 1 >= coalesce(e.max_attempts, ` + maxAttempts + `)`
	return `attempts = e.attempts + 1,
    last_error = f.error,
    status = CASE WHEN ` + dead + ` THEN 'failed' ELSE 'pending' END,
    available_at = CASE WHEN ` + dead + ` THEN e.available_at ELSE now() + f.delay_ms * interval '1 millisecond' END,`
}
