package outbox

import (
	"context"
	"errors"
	"log/slog"

	"github.com/outboxkit/outbox/internal/driver"
)

// ErrLeaseExpired is the error the dead-letter hooks get for an event that
// the lease rescue dead-lettered: its last attempt ended with the relay
// that held it dying or hanging, not with an error from the sink. Its last
// error in the table says which relays held it, and Event.LeaseExpiries
// how many of its attempts ended so.
var ErrLeaseExpired = errors.New("outbox: the event's last attempt ended in a lease expiry: the relay holding it died or hung")

// rescue settles up to limit events whose lease expired, runs the hooks,
// and returns how many it settled. The statement runs within DBTimeout.
func (r *Relay) rescue(ctx context.Context, limit int) (int, error) {
	dbCtx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	res, err := r.drv.RescueExpired(dbCtx, driver.RescueParams{Limit: limit, MaxAttempts: r.cfg.MaxAttempts})
	cancel()
	if err != nil {
		return 0, err
	}
	return r.settleRescue(ctx, res), nil
}

// settleRescue logs what a rescue did, wakes the workers for the rescued
// events, runs the dead-letter and rescue hooks, and returns how many
// events it settled.
func (r *Relay) settleRescue(ctx context.Context, res driver.RescueResult) int {
	n := len(res.Rescued) + len(res.Dead)
	if n == 0 {
		return 0
	}
	if len(res.Rescued) > 0 {
		r.log.Warn("rescued events whose lease expired; each is claimed alone from now on",
			slog.Int("events", len(res.Rescued)))
		r.Wake()
	}
	info := RescueInfo{RelayID: r.cfg.RelayID, Rescued: res.Rescued, Dead: eventsFromRows(res.Dead)}
	r.stampSource(info.Dead)
	for _, e := range info.Dead {
		r.deadLetter(ctx, e, ErrLeaseExpired)
	}
	r.report.batch(BatchInfo{Dead: len(info.Dead)})
	for _, h := range r.rescueHooks {
		r.safeHook(func() { h.OnRescue(ctx, info) })
	}
	return n
}
