package pgdriver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox/internal/driver"
)

// replicationSlotsSQL reads the capture slots recorded in outbox_capture
// (%[1]s) as pg_replication_slots shows them, with their lease rows in
// outbox_leases (%[2]s): the view reads the slots from shared memory, the
// joins are by primary key, so the statement costs the same however busy
// the outbox is. A recorded slot the server lost is kept (exists false).
// On a standby the WAL position is the last replayed one. %[3]s are
// wal_status and safe_wal_size, or NULLs before PostgreSQL 13.
const replicationSlotsSQL = `WITH pos AS (
    SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END AS lsn
)
SELECT c.slot_name, s.slot_name IS NOT NULL, coalesce(s.active, false), s.active_pid::bigint,
    pg_wal_lsn_diff(pos.lsn, s.restart_lsn)::bigint, pg_wal_lsn_diff(pos.lsn, s.confirmed_flush_lsn)::bigint,
    coalesce(s.confirmed_flush_lsn::text, ''), %[3]s,
    coalesce(l.holder, ''), l.expires_at, coalesce(l.expires_at <= now(), false)
FROM %[1]s c
CROSS JOIN pos
LEFT JOIN pg_catalog.pg_replication_slots s ON s.slot_name = c.slot_name
LEFT JOIN %[2]s l ON l.name = 'capture:' || c.slot_name
ORDER BY c.slot_name`

// ReplicationSlots reads the capture slots recorded for the schema, none
// when capture was never set up: one statement on the catalog to find
// outbox_capture, one on pg_replication_slots. A role that may not read
// outbox_capture or outbox_leases gets the refusal in Denied, not an
// error, so that stats still show everything else.
func (d *Driver) ReplicationSlots(ctx context.Context) (driver.CaptureSlots, error) {
	var (
		out     driver.CaptureSlots
		exists  bool
		version int
	)
	if err := d.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, current_setting('server_version_num')::int`,
		d.captureTable()).Scan(&exists, &version); err != nil || !exists {
		return out, wrap(err)
	}
	walCols := `s.wal_status::text, s.safe_wal_size::bigint`
	if version < 130000 {
		walCols = `NULL::text, NULL::bigint`
	}
	rows, err := d.pool.Query(ctx, fmt.Sprintf(replicationSlotsSQL, d.captureTable(), d.ident("outbox_leases"), walCols))
	if err != nil {
		return deniedSlots(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			s     driver.ReplicationSlot
			until *time.Time
		)
		if err := rows.Scan(&s.Name, &s.Exists, &s.Active, &s.ActivePID, &s.RetainedBytes, &s.UnconfirmedBytes,
			&s.ConfirmedFlushLSN, &s.WALStatus, &s.SafeWALSize, &s.Holder, &until, &s.HolderExpired); err != nil {
			return out, wrap(err)
		}
		if until != nil {
			s.HolderUntil = *until
		}
		out.Slots = append(out.Slots, s)
	}
	if err := rows.Err(); err != nil {
		return deniedSlots(err)
	}
	return out, nil
}

// deniedSlots turns an insufficient_privilege error (42501) into a
// CaptureSlots that says what to grant; other errors stay errors.
func deniedSlots(err error) (driver.CaptureSlots, error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return driver.CaptureSlots{Denied: pgErr.Message + ": grant the role SELECT on outbox_capture and outbox_leases to see the capture slots"}, nil
	}
	return driver.CaptureSlots{}, wrap(err)
}
