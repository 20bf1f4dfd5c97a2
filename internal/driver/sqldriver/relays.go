package sqldriver

import (
	"context"
	"database/sql"

	"github.com/outboxkit/outbox/internal/driver"
)

// Heartbeat upserts the relay's row with the dialect's upsert
// (Dialect.RelayUpsert; its delivery columns too when b.WithDelivery) and
// forgets long-stale rows of other relays (unless b.Forget is negative),
// in one transaction. The table holds a row per relay process, so the delete
// reads a handful of rows.
func (d *Driver) Heartbeat(ctx context.Context, b driver.Beat) error {
	t := d.d.Table(d.schema, "outbox_relays")
	var lastClaim any
	if !b.LastClaim.IsZero() {
		lastClaim = d.d.FormatTime(b.LastClaim)
	}
	return d.inTx(ctx, func(tx Tx) error {
		args := []any{b.RelayID, b.Host, b.PID, b.Version, b.Sink, b.EventTypes}
		if b.WithDelivery {
			args = append(args, b.Delivery.Ordering, b.Delivery.OrderedFailure, b.Delivery.Leases)
		}
		if _, err := tx.ExecContext(ctx, d.d.RelayUpsert(t, b.WithDelivery), append(args, b.TTL.Milliseconds(), lastClaim, b.Start)...); err != nil {
			return err
		}
		if b.Forget < 0 {
			return nil
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM `+t+` WHERE `+d.d.Quote("expires_at")+` < `+d.d.NowPlusMillis()+
			` AND `+d.d.Quote("relay_id")+` <> ?`, -b.Forget.Milliseconds(), b.RelayID)
		return err
	})
}

// RemoveRelay deletes the relay's heartbeat row.
func (d *Driver) RemoveRelay(ctx context.Context, relayID string) error {
	_, err := d.exec(ctx, `DELETE FROM `+d.d.Table(d.schema, "outbox_relays")+` WHERE `+d.d.Quote("relay_id")+` = ?`, relayID)
	return err
}

// Relays reads every heartbeat row with the database clock.
func (d *Driver) Relays(ctx context.Context, withDelivery bool) ([]driver.RelayRow, error) {
	q := d.d.Quote
	delivery := "NULL, NULL, NULL"
	if withDelivery {
		delivery = q("ordering") + ", " + q("ordered_failure") + ", " + q("leases")
	}
	rows, err := d.db.QueryContext(ctx, `SELECT `+q("relay_id")+`, `+q("host")+`, `+q("pid")+`, `+q("version")+`, `+
		q("sink")+`, `+q("event_types")+`, `+q("started_at")+`, `+q("last_seen")+`, `+q("expires_at")+`, `+
		q("last_claim_at")+`, `+d.d.Now()+`, `+delivery+`
FROM `+d.d.Table(d.schema, "outbox_relays")+`
ORDER BY `+q("relay_id"))
	if err != nil {
		return nil, d.wrap(err)
	}
	defer func() { _ = rows.Close() }()
	var out []driver.RelayRow
	for rows.Next() {
		var (
			r                                        driver.RelayRow
			started, seen, expires, lastClaim, dbNow Time
			ordering, orderedFailure, leases         sql.NullString
		)
		if err := rows.Scan(&r.RelayID, &r.Host, &r.PID, &r.Version, &r.Sink, &r.EventTypes,
			&started, &seen, &expires, &lastClaim, &dbNow, &ordering, &orderedFailure, &leases); err != nil {
			return nil, d.wrap(err)
		}
		if ordering.Valid && orderedFailure.Valid && leases.Valid {
			r.Delivery = driver.Delivery{Ordering: ordering.String, OrderedFailure: orderedFailure.String, Leases: leases.String}
		}
		r.StartedAt, r.LastSeen, r.ExpiresAt, r.LastClaim, r.Now = started.Time, seen.Time, expires.Time, lastClaim.Time, dbNow.Time
		out = append(out, r)
	}
	return out, d.wrap(rows.Err())
}
