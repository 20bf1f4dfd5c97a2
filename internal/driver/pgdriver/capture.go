package pgdriver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/driver"
)

// captureStreamed is the SQL condition, on a row of outbox_events (alias
// a, with its dot, or empty), that the change-data-capture stream of the
// slot named by the SQL expression slot delivers the event: a pending row,
// due when it was written, unchanged since (updated_at is still the
// insert's now()), written by a transaction that the snapshot recorded
// when the slot was created (in outbox_capture, captureTable) does not
// see, so its insert is in the slot's stream. The stream settles only such
// rows, and the table path of a capture relay claims only the others
// (driver.ClaimParams.CaptureSlot): a failed publish from the stream
// changes the row (attempts, updated_at), which hands it to the table path
// for good. Without a recorded slot (dropped) no row is the stream's. The
// snapshot is read in the statement (an InitPlan, once), so a slot created
// again (lost in a failover) hands the table path what the new slot does
// not stream, without restarting any relay.
func captureStreamed(captureTable, a, slot string) string {
	return a + `status = 'pending' AND ` + a + `available_at <= ` + a + `created_at AND ` + a + `updated_at = ` + a + `created_at
    AND coalesce(NOT pg_visible_in_snapshot(` + a + `txid, (SELECT c.snapshot FROM ` + captureTable + ` c WHERE c.slot_name = ` + slot + `::text)), false)`
}

// captureStreamedByID is captureStreamed for a statement that finds its
// rows by ID (the stream's marks): the same condition, with the status
// test written so that no partial index on status = 'pending' matches it
// (status is NOT NULL, so coalesce changes nothing). Otherwise, on a table
// without fresh statistics, the planner read the marks' rows from the
// partition or pending index, that is the whole unsettled backlog, for
// every mark (10–19 ms for 60 IDs beside 20,000 pending rows, against
// 0.4–1.4 ms through the primary key): a stream of small transactions then
// marked ever more slowly while its backlog grew.
func captureStreamedByID(captureTable, a, slot string) string {
	return `coalesce(` + a + `status = 'pending', false) AND ` +
		strings.TrimPrefix(captureStreamed(captureTable, a, slot), a+`status = 'pending' AND `)
}

// captureMissed is the SQL condition, on a pending row of outbox_events
// (alias a, with its dot, or empty), that the slot named by the SQL
// expression slot has moved past the row's transaction for good: the
// transaction (the txid column, as a 32-bit xid; age() handles the
// wraparound) is older than the slot's catalog_xmin. A transaction older
// than catalog_xmin ended before the slot's restart position, which is
// never past its confirmed position, and a capture relay confirms a
// position only after it settled every event before it. So a row of such
// a transaction that is still the stream's (captureStreamed) was skipped
// or its mark was lost (a mark committed without a flush before a crash
// of the server): the stream will never deliver it again, and the table
// path claims it (the safety net; at worst a duplicate, which
// at-least-once delivery allows). catalog_xmin advances with the
// server's running-transactions records (at every checkpoint and every
// 15 s of activity), so the net catches such a row within seconds to
// minutes, never while the stream may still deliver it. Without the slot
// the subquery is NULL and the condition is false.
func captureMissed(a, slot string) string {
	return `coalesce(age((` + a + `txid::text::bigint % 4294967296)::text::xid) > (SELECT age(s.catalog_xmin) FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = ` + slot + `::text), false)`
}

// captureClaimWindow is how many due pending rows, the oldest first, the
// table path of a capture relay looks at per claim (queries.go,
// claimCapture): ten batches, at least CaptureClaimWindowMin, so that the
// rows it owns among the stream's backlog are found while the claim reads
// a bounded slice of the index however large the backlog grows.
func captureClaimWindow(batch int) int { return max(10*batch, CaptureClaimWindowMin) }

// CaptureClaimWindowMin is the least number of due pending rows the table
// path of a capture relay looks at per claim.
const CaptureClaimWindowMin = 1000

// CaptureSlot is a capture relay's replication slot and publication, as
// recorded in outbox_capture.
type CaptureSlot struct {
	Name        string // the slot's and the publication's name
	Snapshot    string // the pg_snapshot exported when the slot was created
	CreatedAt   time.Time
	Holder      string    // the relay streaming from it, "" for none
	HolderUntil time.Time // when the holder's lease row expires
}

// captureTable is outbox_capture: one row per capture slot of the schema,
// created on first use (not a numbered migration: it exists only where
// capture is used, like the slot and the publication it describes).
func (d *Driver) captureTable() string { return d.ident("outbox_capture") }

// CaptureLeaseName is the outbox_leases row of the relay streaming from
// slot: it records the holder for operators; the slot itself is the lock.
func CaptureLeaseName(slot string) string { return "capture:" + slot }

// WALLevel returns the server's wal_level.
func (d *Driver) WALLevel(ctx context.Context) (string, error) {
	var level string
	err := d.pool.QueryRow(ctx, `SELECT current_setting('wal_level')`).Scan(&level)
	return level, wrap(err)
}

// EnsureCaptureTable creates outbox_capture when it is missing.
func (d *Driver) EnsureCaptureTable(ctx context.Context) error {
	_, err := d.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+d.captureTable()+` (
    slot_name  text PRIMARY KEY,
    snapshot   pg_snapshot NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)`)
	return wrap(err)
}

// EnsurePublication creates the publication name on the outbox table, for
// inserts only, when it does not exist.
func (d *Driver) EnsurePublication(ctx context.Context, name string) error {
	var exists bool
	if err := d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_publication WHERE pubname = $1)`, name).Scan(&exists); err != nil {
		return wrap(err)
	}
	if exists {
		return nil
	}
	_, err := d.pool.Exec(ctx, `CREATE PUBLICATION `+pgx.Identifier{name}.Sanitize()+` FOR TABLE `+d.table+` WITH (publish = 'insert')`)
	if isDuplicate(err) {
		return nil // another relay created it first
	}
	return wrap(err)
}

// isDuplicate reports a duplicate_object error (42710).
func isDuplicate(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == "42710"
}

// SlotExists reports whether the replication slot exists in this database,
// and whether the server invalidated it (wal_status lost: it kept more WAL
// than max_slot_wal_keep_size), which makes it useless.
func (d *Driver) SlotExists(ctx context.Context, slot string) (exists, lost bool, err error) {
	err = d.pool.QueryRow(ctx, `SELECT count(*) > 0, coalesce(bool_or(wal_status = 'lost'), false)
FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, slot).Scan(&exists, &lost)
	return exists, lost, wrap(err)
}

// RecordCaptureSlot records slot with the snapshot exported by its
// creation: it imports the snapshot (snapshotName, which is valid while the
// replication connection that created the slot runs no other command) and
// stores it as a pg_snapshot, replacing any row of an older slot of that
// name.
func (d *Driver) RecordCaptureSlot(ctx context.Context, slot, snapshotName string) (string, error) {
	var snap string
	err := pgx.BeginTxFunc(ctx, d.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		// SET TRANSACTION SNAPSHOT takes no parameter; the name is the
		// server's own, quoted as a literal.
		if _, err := tx.Exec(ctx, `SET TRANSACTION SNAPSHOT `+quoteLiteral(snapshotName)); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap)
	})
	if err != nil {
		return "", wrap(err)
	}
	_, err = d.pool.Exec(ctx, `INSERT INTO `+d.captureTable()+` (slot_name, snapshot) VALUES ($1, $2::pg_snapshot)
ON CONFLICT (slot_name) DO UPDATE SET snapshot = EXCLUDED.snapshot, created_at = now()`, slot, snap)
	return snap, wrap(err)
}

// CaptureSlot returns the recorded slot and who streams from it; found is
// false when it is not recorded.
func (d *Driver) CaptureSlot(ctx context.Context, slot string) (s CaptureSlot, found bool, err error) {
	var exists bool
	if err := d.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, d.captureTable()).Scan(&exists); err != nil || !exists {
		return s, false, wrap(err)
	}
	var until *time.Time
	err = d.pool.QueryRow(ctx, `SELECT c.slot_name, c.snapshot::text, c.created_at, coalesce(l.holder, ''), l.expires_at
FROM `+d.captureTable()+` c LEFT JOIN `+d.ident("outbox_leases")+` l ON l.name = $2 AND l.expires_at > now()
WHERE c.slot_name = $1`, slot, CaptureLeaseName(slot)).Scan(&s.Name, &s.Snapshot, &s.CreatedAt, &s.Holder, &until)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, false, nil
	}
	if until != nil {
		s.HolderUntil = *until
	}
	return s, err == nil, wrap(err)
}

// HoldCapture writes the lease row of the relay streaming from slot:
// holder until now() + ttl by the database clock. The slot is the lock
// (one walsender per slot); the row only tells operators who holds it.
func (d *Driver) HoldCapture(ctx context.Context, slot, holder string, ttl time.Duration) error {
	_, err := d.pool.Exec(ctx, `INSERT INTO `+d.ident("outbox_leases")+` AS l (name, holder, expires_at, acquired_at)
VALUES ($1, $2, now() + $3::bigint * interval '1 millisecond', now())
ON CONFLICT (name) DO UPDATE
SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at,
    acquired_at = CASE WHEN l.holder = EXCLUDED.holder THEN l.acquired_at ELSE EXCLUDED.acquired_at END`,
		CaptureLeaseName(slot), holder, ttl.Milliseconds())
	return wrap(err)
}

// SlotLag is what pg_replication_slots says of a slot.
type SlotLag struct {
	Active bool
	// RetainedBytes is the WAL the slot keeps on the server's disk: from
	// its restart_lsn to the current WAL position.
	RetainedBytes int64
	// UnconfirmedBytes is the WAL written since the consumer's confirmed
	// position.
	UnconfirmedBytes int64
	// WALStatus is pg_replication_slots.wal_status: reserved, extended,
	// unreserved or lost.
	WALStatus string
}

// ReplicationSlotLag reads the slot's lag; found is false when the slot
// does not exist.
func (d *Driver) ReplicationSlotLag(ctx context.Context, slot string) (lag SlotLag, found bool, err error) {
	err = d.pool.QueryRow(ctx, `SELECT active,
    coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint,
    coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint,
    coalesce(wal_status, '')
FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lag.Active, &lag.RetainedBytes, &lag.UnconfirmedBytes, &lag.WALStatus)
	if errors.Is(err, pgx.ErrNoRows) {
		return lag, false, nil
	}
	return lag, err == nil, wrap(err)
}

// DropCapture drops the slot (which must not be active), the publication
// and their rows. It reports what it found to drop.
func (d *Driver) DropCapture(ctx context.Context, slot string) (droppedSlot, droppedPublication bool, err error) {
	var active *bool
	err = d.pool.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return false, false, wrap(err)
	case *active:
		return false, false, fmt.Errorf("replication slot %s is in use by a running relay: stop the capture relays first", slot)
	default:
		if _, err := d.pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
			return false, false, wrap(err)
		}
		droppedSlot = true
	}
	if err := d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_publication WHERE pubname = $1)`, slot).Scan(&droppedPublication); err != nil {
		return droppedSlot, false, wrap(err)
	}
	if droppedPublication {
		if _, err := d.pool.Exec(ctx, `DROP PUBLICATION IF EXISTS `+pgx.Identifier{slot}.Sanitize()); err != nil {
			return droppedSlot, false, wrap(err)
		}
	}
	var exists bool
	if err := d.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, d.captureTable()).Scan(&exists); err != nil {
		return droppedSlot, droppedPublication, wrap(err)
	}
	if exists {
		if _, err := d.pool.Exec(ctx, `DELETE FROM `+d.captureTable()+` WHERE slot_name = $1`, slot); err != nil {
			return droppedSlot, droppedPublication, wrap(err)
		}
	}
	_, err = d.pool.Exec(ctx, `DELETE FROM `+d.ident("outbox_leases")+` WHERE name = $1`, CaptureLeaseName(slot))
	return droppedSlot, droppedPublication, wrap(err)
}

// CaptureSettle settles what the capture stream published, in one
// transaction: the delivered rows are marked processed, deleted or
// archived per retention, and the failed ones get the table path's
// failure mark (attempts + 1, last_error, back to pending after the delay,
// or failed at max attempts or when permanent). Every statement touches
// only rows that are still as the stream found them (captureStreamed), so
// a replay after a crash changes nothing the first pass or the table path
// already settled. slot names the capture slot.
//
// txids are the events' transactions. Logical decoding hands out a
// transaction as soon as its commit record is flushed, a moment before
// the transaction becomes visible to other sessions; a mark in that moment
// would not see its rows and leave them pending for good. So the settle
// first waits (polling every millisecond, within ctx) until every one of
// them is visible; the marks, later statements of a READ COMMITTED
// transaction, then see their rows.
func (d *Driver) CaptureSettle(ctx context.Context, slot, relayID string, retention driver.Retention, txids []uint64,
	delivered []int64, maxAttempts int, failures []driver.Failure,
) (driver.FailResult, error) {
	var res driver.FailResult
	xids := make([]string, len(txids))
	for i, x := range txids {
		xids[i] = strconv.FormatUint(x, 10)
	}
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		res = driver.FailResult{}
		for len(xids) > 0 {
			var running int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM unnest($1::text[]::xid8[]) AS x
WHERE NOT pg_visible_in_snapshot(x, pg_current_snapshot())`, xids).Scan(&running); err != nil {
				return err
			}
			if running == 0 {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
		if len(delivered) > 0 {
			args := []any{delivered, slot, relayID}
			if retention == driver.RetainDelete {
				args = args[:2] // the relay is not recorded
			}
			_, err := tx.Exec(ctx, captureSettleSQL(d, retention), args...)
			if err != nil {
				return err
			}
		}
		if len(failures) == 0 {
			return nil
		}
		ids := make([]int64, len(failures))
		msgs := make([]string, len(failures))
		permanent := make([]bool, len(failures))
		delays := make([]int64, len(failures))
		for i, fl := range failures {
			ids[i], msgs[i], permanent[i], delays[i] = fl.ID, fl.Error, fl.Permanent, fl.Delay.Milliseconds()
		}
		rows, err := tx.Query(ctx, captureFailSQL(d), ids, slot, msgs, permanent, delays, maxAttempts, relayID)
		if err != nil {
			return err
		}
		var id int64
		var status string
		_, err = pgx.ForEachRow(rows, []any{&id, &status}, func() error {
			if status == driver.StatusFailed {
				res.Dead = append(res.Dead, id)
			} else {
				res.Retried = append(res.Retried, id)
			}
			return nil
		})
		return err
	})
	return res, wrap(err)
}

// captureSettleSQL is the stream's mark of delivered events for
// retention ($1 their IDs, $2 the slot, $3 the relay but for
// RetainDelete). It touches only rows still exactly as the stream saw
// them (captureStreamedByID), read through the primary key.
func captureSettleSQL(d *Driver, retention driver.Retention) string {
	streamed := captureStreamedByID(d.captureTable(), "", "$2")
	switch retention {
	case driver.RetainDelete:
		return `DELETE FROM ` + d.table + ` WHERE id = ANY($1::bigint[]) AND ` + streamed
	case driver.RetainArchive:
		return `WITH moved AS (
    DELETE FROM ` + d.table + ` WHERE id = ANY($1::bigint[]) AND ` + streamed + `
    RETURNING id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
              attempts, max_attempts, last_error, available_at, created_at
)
INSERT INTO ` + d.archiveTable() + ` (id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
    status, attempts, max_attempts, last_error, available_at, locked_by, created_at, updated_at, processed_at)
SELECT id, event_type, aggregate_type, aggregate_id, payload, headers, idempotency_key,
    'processed', attempts, max_attempts, last_error, available_at, $3, created_at, now(), now()
FROM moved
ON CONFLICT DO NOTHING`
	default:
		return `UPDATE ` + d.table + `
SET status = 'processed', processed_at = now(), updated_at = now(), locked_by = $3
WHERE id = ANY($1::bigint[]) AND ` + streamed
	}
}

// captureFailSQL is the stream's failure mark ($1 IDs, $2 the slot, $3
// errors, $4 permanent, $5 delays in ms, $6 the relay's max attempts, $7
// the relay), as the table path's markFailed, from the row's own attempts
// and max_attempts; updated_at moves, so the row belongs to the table
// path from now on.
func captureFailSQL(d *Driver) string {
	return `UPDATE ` + d.table + ` AS e
SET ` + failureSet("$6") + `
    locked_by = $7,
    updated_at = now()
FROM unnest($1::bigint[], $3::text[], $4::boolean[], $5::bigint[]) AS f(id, error, permanent, delay_ms)
WHERE e.id = f.id AND ` + captureStreamedByID(d.captureTable(), "e.", "$2") + `
RETURNING e.id, e.status`
}

// archiveTable is the quoted outbox_events_archive.
func (d *Driver) archiveTable() string { return d.ident("outbox_events_archive") }

// RecordedSlot is a capture slot of the schema, as pg_replication_slots
// shows it.
type RecordedSlot struct {
	Name          string
	Active        bool // a capture relay streams from it
	RetainedBytes int64
}

// CaptureSlots lists the recorded capture slots of the schema that exist:
// an inactive one keeps WAL on the server's disk until a capture relay
// streams from it or it is dropped. None when capture was never set up.
func (d *Driver) CaptureSlots(ctx context.Context) ([]RecordedSlot, error) {
	var exists bool
	if err := d.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, d.captureTable()).Scan(&exists); err != nil || !exists {
		return nil, wrap(err)
	}
	rows, err := d.pool.Query(ctx, `SELECT s.slot_name, s.active, coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn), 0)::bigint
FROM `+d.captureTable()+` c JOIN pg_replication_slots s ON s.slot_name = c.slot_name
ORDER BY 1`)
	if err != nil {
		return nil, wrap(err)
	}
	var out []RecordedSlot
	var s RecordedSlot
	_, err = pgx.ForEachRow(rows, []any{&s.Name, &s.Active, &s.RetainedBytes}, func() error {
		out = append(out, s)
		return nil
	})
	return out, wrap(err)
}
