package pgdriver

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outbox/internal/driver"
)

// Claim leases a batch of due pending events.
func (d *Driver) Claim(ctx context.Context, p driver.ClaimParams) (driver.Claim, error) {
	var (
		rows pgx.Rows
		err  error
	)
	switch {
	case p.CaptureSlot != "" && len(p.EventTypes) > 0:
		rows, err = d.pool.Query(ctx, d.q.claimCaptureFiltered, p.BatchSize, p.RelayID, p.Lease.Milliseconds(), p.CaptureSlot,
			captureClaimWindow(p.BatchSize), driver.LikePatterns(p.EventTypes))
	case p.CaptureSlot != "":
		rows, err = d.pool.Query(ctx, d.q.claimCapture, p.BatchSize, p.RelayID, p.Lease.Milliseconds(), p.CaptureSlot,
			captureClaimWindow(p.BatchSize))
	case len(p.EventTypes) == 0 && p.MaxBytes <= 0:
		rows, err = d.pool.Query(ctx, d.q.claim, p.BatchSize, p.RelayID, p.Lease.Milliseconds())
	case len(p.EventTypes) == 0:
		rows, err = d.pool.Query(ctx, d.q.claimBudget, p.BatchSize, p.RelayID, p.Lease.Milliseconds(), p.MaxBytes)
	case p.MaxBytes <= 0:
		rows, err = d.pool.Query(ctx, d.q.claimFiltered, p.BatchSize, p.RelayID, p.Lease.Milliseconds(), driver.LikePatterns(p.EventTypes))
	default:
		rows, err = d.pool.Query(ctx, d.q.claimFilteredBudget, p.BatchSize, p.RelayID, p.Lease.Milliseconds(),
			driver.LikePatterns(p.EventTypes), p.MaxBytes)
	}
	if err != nil {
		return driver.Claim{}, wrap(err)
	}
	events, err := collectClaimed(rows, p)
	if err != nil {
		return driver.Claim{}, wrap(err)
	}
	claim := driver.Claim{Events: events}
	if len(events) > 0 {
		claim.LockedUntil = events[0].LockedUntil
	}
	// RETURNING has no order; publish in claim order.
	slices.SortFunc(claim.Events, func(a, b driver.Event) int {
		if c := a.AvailableAt.Compare(b.AvailableAt); c != 0 {
			return c
		}
		return int(a.ID - b.ID)
	})
	return claim, nil
}

// MarkProcessed marks published events processed, or deletes or archives
// them.
func (d *Driver) MarkProcessed(ctx context.Context, f driver.Fence, ids []int64, retention driver.Retention) (int64, error) {
	if len(f.Parts) > 0 {
		return d.markPartitioned(ctx, f, ids, retention)
	}
	sqlText := d.q.markProcessed
	switch retention {
	case driver.RetainDelete:
		sqlText = d.q.markDeleted
	case driver.RetainArchive:
		var n int64
		err := d.pool.QueryRow(ctx, d.q.markArchived, ids, f.RelayID, f.LockedUntil).Scan(&n)
		return n, wrap(err)
	}
	tag, err := d.pool.Exec(ctx, sqlText, ids, f.RelayID, f.LockedUntil)
	if err != nil {
		return 0, wrap(err)
	}
	return tag.RowsAffected(), nil
}

// MarkFailed records failed publishes in one statement.
func (d *Driver) MarkFailed(ctx context.Context, f driver.Fence, maxAttempts int, failures []driver.Failure) (driver.FailResult, error) {
	ids := make([]int64, len(failures))
	msgs := make([]string, len(failures))
	permanent := make([]bool, len(failures))
	delays := make([]int64, len(failures))
	for i, fl := range failures {
		ids[i], msgs[i], permanent[i], delays[i] = fl.ID, fl.Error, fl.Permanent, fl.Delay.Milliseconds()
	}
	var (
		rows pgx.Rows
		err  error
	)
	if len(f.Parts) > 0 {
		rows, err = d.pool.Query(ctx, d.parts.markFailed, ids, msgs, permanent, delays, maxAttempts, f.RelayID, f.Parts, f.Fences)
	} else {
		rows, err = d.pool.Query(ctx, d.q.markFailed, ids, msgs, permanent, delays, maxAttempts, f.RelayID, f.LockedUntil)
	}
	if err != nil {
		return driver.FailResult{}, wrap(err)
	}
	var res driver.FailResult
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
	return res, wrap(err)
}

// Release returns events to pending without spending an attempt.
func (d *Driver) Release(ctx context.Context, f driver.Fence, ids []int64) (int64, error) {
	if len(f.Parts) > 0 {
		// Read from an owned partition: never left pending. The events
		// were not published, so a takeover must not count them.
		if f.InFlight {
			if _, err := d.pool.Exec(ctx, d.parts.clearInFlight, f.RelayID, f.Parts, f.Fences); err != nil {
				return 0, wrap(err)
			}
		}
		return int64(len(ids)), nil
	}
	tag, err := d.pool.Exec(ctx, d.q.release, ids, f.RelayID, f.LockedUntil)
	if err != nil {
		return 0, wrap(err)
	}
	return tag.RowsAffected(), nil
}

// RescueExpired settles events whose lease expired, in one transaction:
// back to pending, or to failed once out of attempts.
func (d *Driver) RescueExpired(ctx context.Context, p driver.RescueParams) (driver.RescueResult, error) {
	var res driver.RescueResult
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var err error
		res, err = d.rescueRows(ctx, tx, d.q.rescueSelect, p.Limit, p.MaxAttempts)
		return err
	})
	if err != nil {
		return driver.RescueResult{}, wrap(err)
	}
	return res, nil
}

// rescueRows rescues the rows selectSQL reads and locks in tx, with the
// columns of driver.Expired: each goes back to pending, or to failed once
// out of attempts, with the expiry counted and noted.
func (d *Driver) rescueRows(ctx context.Context, tx pgx.Tx, selectSQL string, args ...any) (driver.RescueResult, error) {
	var res driver.RescueResult
	rows, err := tx.Query(ctx, selectSQL, args...)
	if err != nil {
		return res, err
	}
	var e driver.Expired
	var ids, dead []int64
	var statuses, errs []string
	_, err = pgx.ForEachRow(rows, []any{&e.ID, &e.Attempts, &e.LeaseExpiries, &e.MaxAttempts, &e.LastError, &e.LockedBy}, func() error {
		status, lastErr := e.Rescue()
		ids, statuses, errs = append(ids, e.ID), append(statuses, status), append(errs, lastErr)
		if status == driver.StatusFailed {
			dead = append(dead, e.ID)
		} else {
			res.Rescued = append(res.Rescued, e.ID)
		}
		return nil
	})
	if err != nil || len(ids) == 0 {
		return res, err
	}
	rows, err = tx.Query(ctx, d.q.rescue, ids, statuses, errs)
	if err != nil {
		return res, err
	}
	deadRows, err := collectEvents(rows, len(dead))
	if err != nil {
		return res, err
	}
	if len(dead) > 0 {
		res.Dead = deadRows
	}
	slices.Sort(res.Rescued)
	return res, nil
}

// collectClaimed scans a claim's rows in claimColumns order.
func collectClaimed(rows pgx.Rows, p driver.ClaimParams) ([]driver.Event, error) {
	defer rows.Close()
	// Light traffic claims a few events at a time: start small.
	events := make([]driver.Event, 0, min(p.BatchSize, 64))
	sc := newClaimScanner()
	for rows.Next() {
		ev, err := sc.scan(rows, p.RelayID)
		if err != nil {
			return nil, err
		}
		events = append(events, ev)
	}
	return events, rows.Err()
}

// claimScanner scans claimed rows in claimColumns order, then the extra
// destinations it was made with. The variable-length columns are read in
// place (valid until the next row) and copied into one arena for the
// batch, so a claim makes no allocation per event unless the event has
// headers.
type claimScanner struct {
	mem                                arena
	e                                  driver.Event
	eventType, aggType, aggID, idemKey pgtype.DriverBytes
	payload, headers                   pgtype.DriverBytes
	dest                               []any
}

func newClaimScanner(extra ...any) *claimScanner {
	s := &claimScanner{}
	s.dest = append([]any{&s.e.ID, &s.eventType, &s.aggType, &s.aggID, &s.payload, &s.headers,
		&s.idemKey, &s.e.Attempts, &s.e.MaxAttempts, &s.e.AvailableAt, &s.e.LockedUntil, &s.e.CreatedAt, &s.e.LeaseExpiries}, extra...)
	return s
}

// scan reads the current row as an event claimed by relayID.
func (s *claimScanner) scan(rows pgx.Rows, relayID string) (driver.Event, error) {
	if err := rows.Scan(s.dest...); err != nil {
		return driver.Event{}, err
	}
	e := &s.e
	ev := driver.Event{ID: e.ID, Status: driver.StatusProcessing, LockedBy: relayID,
		EventType: s.mem.string(s.eventType), AggregateType: s.mem.string(s.aggType), AggregateID: s.mem.string(s.aggID),
		Payload: s.mem.bytes(s.payload), IdempotencyKey: s.mem.string(s.idemKey),
		Attempts: e.Attempts, MaxAttempts: e.MaxAttempts,
		AvailableAt: e.AvailableAt, LockedUntil: e.LockedUntil, CreatedAt: e.CreatedAt, LeaseExpiries: e.LeaseExpiries}
	var err error
	if ev.Headers, err = driver.DecodeHeaders(s.headers); err != nil {
		return driver.Event{}, fmt.Errorf("event %d: %w", ev.ID, err)
	}
	return ev, nil
}

// collectEvents scans rows in eventColumns order.
func collectEvents(rows pgx.Rows, capacity int) ([]driver.Event, error) {
	defer rows.Close()
	events := make([]driver.Event, 0, driver.PreSize(capacity))
	var (
		headers     []byte
		lockedUntil pgtype.Timestamptz // value types: no allocation per row
		processedAt pgtype.Timestamptz
	)
	for rows.Next() {
		var e driver.Event
		err := rows.Scan(&e.ID, &e.EventType, &e.AggregateType, &e.AggregateID, &e.Payload, &headers,
			&e.IdempotencyKey, &e.Status, &e.Attempts, &e.MaxAttempts, &e.LastError, &e.AvailableAt,
			&lockedUntil, &e.LockedBy, &e.CreatedAt, &e.UpdatedAt, &processedAt, &e.LeaseExpiries)
		if err != nil {
			return nil, err
		}
		if e.Headers, err = driver.DecodeHeaders(headers); err != nil {
			return nil, fmt.Errorf("event %d: %w", e.ID, err)
		}
		e.LockedUntil, e.ProcessedAt = lockedUntil.Time, processedAt.Time
		events = append(events, e)
	}
	return events, rows.Err()
}
