package pgdriver

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/driver"
)

// Heartbeat upserts the relay's row and forgets long-stale rows of other
// relays in one statement: the delete runs in a data-modifying CTE, which
// PostgreSQL executes whether or not the outer statement reads it. The
// table holds a row per relay process, so the delete reads a handful of
// rows.
func (d *Driver) Heartbeat(ctx context.Context, b driver.Beat) error {
	t := d.ident("outbox_relays")
	var lastClaim *time.Time
	if !b.LastClaim.IsZero() {
		lastClaim = &b.LastClaim
	}
	cols, vals, set := "", "", ""
	forget := b.Forget.Milliseconds()
	if b.Forget < 0 {
		forget = -1 // none
	}
	args := []any{b.RelayID, b.Host, int32(b.PID), b.Version, b.Sink, b.EventTypes, b.TTL.Milliseconds(), lastClaim,
		forget, b.Start}
	if b.WithDelivery {
		cols, vals = ", ordering, ordered_failure, leases", ", $11, $12, $13"
		set = ",\n    ordering = EXCLUDED.ordering, ordered_failure = EXCLUDED.ordered_failure, leases = EXCLUDED.leases"
		args = append(args, b.Delivery.Ordering, b.Delivery.OrderedFailure, b.Delivery.Leases)
	}
	_, err := d.pool.Exec(ctx, `WITH forgotten AS (
    DELETE FROM `+t+`
    WHERE $9::bigint >= 0 AND expires_at < now() - $9::bigint * interval '1 millisecond' AND relay_id <> $1
)
INSERT INTO `+t+` AS r (relay_id, host, pid, version, sink, event_types, started_at, last_seen, expires_at, last_claim_at`+cols+`)
VALUES ($1, $2, $3, $4, $5, $6, now(), now(), now() + $7::bigint * interval '1 millisecond', $8`+vals+`)
ON CONFLICT (relay_id) DO UPDATE
SET host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version, sink = EXCLUDED.sink,
    event_types = EXCLUDED.event_types,
    started_at = CASE WHEN $10::boolean THEN EXCLUDED.started_at ELSE r.started_at END,
    last_seen = EXCLUDED.last_seen, expires_at = EXCLUDED.expires_at, last_claim_at = EXCLUDED.last_claim_at`+set,
		args...)
	return wrap(err)
}

// RemoveRelay deletes the relay's heartbeat row.
func (d *Driver) RemoveRelay(ctx context.Context, relayID string) error {
	_, err := d.pool.Exec(ctx, `DELETE FROM `+d.ident("outbox_relays")+` WHERE relay_id = $1`, relayID)
	return wrap(err)
}

// Relays reads every heartbeat row with the database clock.
func (d *Driver) Relays(ctx context.Context, withDelivery bool) ([]driver.RelayRow, error) {
	delivery := "NULL, NULL, NULL"
	if withDelivery {
		delivery = "ordering, ordered_failure, leases"
	}
	rows, err := d.pool.Query(ctx, `SELECT relay_id, host, pid, version, sink, event_types,
    started_at, last_seen, expires_at, last_claim_at, now(), `+delivery+`
FROM `+d.ident("outbox_relays")+`
ORDER BY relay_id`)
	if err != nil {
		return nil, wrap(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (driver.RelayRow, error) {
		var (
			r                                driver.RelayRow
			pid                              int32
			lastClaim                        *time.Time
			ordering, orderedFailure, leases *string
		)
		err := row.Scan(&r.RelayID, &r.Host, &pid, &r.Version, &r.Sink, &r.EventTypes,
			&r.StartedAt, &r.LastSeen, &r.ExpiresAt, &lastClaim, &r.Now, &ordering, &orderedFailure, &leases)
		r.PID = int(pid)
		if lastClaim != nil {
			r.LastClaim = *lastClaim
		}
		if ordering != nil && orderedFailure != nil && leases != nil {
			r.Delivery = driver.Delivery{Ordering: *ordering, OrderedFailure: *orderedFailure, Leases: *leases}
		}
		return r, err
	})
	return out, wrap(err)
}
