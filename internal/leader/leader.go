// Package leader elects one process of a fleet to run a job, by a lease
// held in a database row (outbox_leases): the elector takes the lease when
// it is free or expired, renews it well before it ends, and gives it up on
// stop. Expiry is judged by the database clock when the lease changes
// hands; the holder itself counts its lease from the moment it sent the
// renewal that succeeded, on its own monotonic clock, so it believes
// itself leader for no longer than the database does.
//
// A row, not an advisory lock: a session-level lock stays with a pooled
// server connection (or is taken by another client) behind PgBouncer in
// transaction mode, and is lost with a silent reconnect.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

// Store is where the lease lives: driver.Scheduler's lease statements.
type Store interface {
	AcquireLease(ctx context.Context, p driver.LeaseParams) (bool, error)
	ReleaseLease(ctx context.Context, name, holder string) error
}

// Config configures an Elector.
type Config struct {
	// Name is the lease's name, one per job.
	Name string
	// Holder names this process in the lease row.
	Holder string
	// TTL is how long one acquisition or renewal lasts. The elector renews
	// every third of it, so two renewals in a row may fail before the lease
	// is lost.
	TTL time.Duration
	// Timeout bounds one database call. Defaults to a third of TTL.
	Timeout time.Duration
	// Logger receives a line when leadership is gained or lost.
	Logger *slog.Logger
	// OnChange is called, from the elector's goroutine, each time this
	// process gains (true) or loses (false) the lease. May be nil.
	OnChange func(leader bool)
}

// Elector keeps trying to hold one lease until its Run returns.
type Elector struct {
	cfg Config

	mu      sync.Mutex
	leader  bool
	validTo time.Time // monotonic: the lease's end as this process counts it
	changed chan struct{}
}

// New returns an elector; Run starts it.
func New(cfg Config) (*Elector, error) {
	switch {
	case cfg.Name == "" || cfg.Holder == "":
		return nil, errors.New("leader: Name and Holder are required")
	case cfg.TTL < 100*time.Millisecond:
		return nil, fmt.Errorf("leader: TTL %v is too short: use at least 100ms", cfg.TTL)
	}
	if cfg.Timeout <= 0 || cfg.Timeout > cfg.TTL/3 {
		cfg.Timeout = cfg.TTL / 3
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Elector{cfg: cfg, changed: make(chan struct{})}, nil
}

// IsLeader reports whether this process holds the lease now: its last
// renewal succeeded and, counted from when it was sent, has not run out.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leader && time.Now().Before(e.validTo)
}

// Changed returns a channel closed at the next change of leadership.
func (e *Elector) Changed() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed
}

// Run tries to take and keep the lease until ctx ends, then releases it
// (with release's context, which should outlive ctx by a little) when it
// held it.
func (e *Elector) Run(ctx context.Context, store Store, release context.Context) {
	interval := e.cfg.TTL / 3
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			if e.set(false, time.Time{}, nil) {
				rctx, cancel := context.WithTimeout(release, e.cfg.Timeout)
				if err := store.ReleaseLease(rctx, e.cfg.Name, e.cfg.Holder); err != nil {
					e.cfg.Logger.Warn("could not release the job lease; another relay takes it over when it expires",
						slog.String("lease", e.cfg.Name), slog.String("error", err.Error()), slog.Duration("lease_ttl", e.cfg.TTL))
				}
				cancel()
			}
			return
		case <-timer.C:
		}
		sent := time.Now()
		cctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
		held, err := store.AcquireLease(cctx, driver.LeaseParams{Name: e.cfg.Name, Holder: e.cfg.Holder, TTL: e.cfg.TTL})
		cancel()
		switch {
		case ctx.Err() != nil:
			// Stopping: the loop's top releases.
		case err != nil:
			// Keep believing until the lease runs out as counted from the
			// last success; IsLeader stops at validTo by itself.
			if e.IsLeader() {
				e.cfg.Logger.Warn("could not renew the job lease; retrying", slog.String("lease", e.cfg.Name), slog.String("error", err.Error()))
			} else {
				e.set(false, time.Time{}, err)
			}
		default:
			e.set(held, sent.Add(e.cfg.TTL), nil)
		}
		timer.Reset(interval)
	}
}

// set records the outcome of an acquisition, logs and reports a change,
// and returns whether this process was leader before.
func (e *Elector) set(leader bool, validTo time.Time, err error) (was bool) {
	e.mu.Lock()
	was = e.leader
	e.leader, e.validTo = leader, validTo
	if leader == was {
		e.mu.Unlock()
		return was
	}
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
	if leader {
		e.cfg.Logger.Info("gained the job lease: this relay runs the scheduled jobs", slog.String("lease", e.cfg.Name), slog.Duration("lease_ttl", e.cfg.TTL))
	} else {
		attrs := []any{slog.String("lease", e.cfg.Name)}
		if err != nil {
			attrs = append(attrs, slog.String("error", err.Error()))
		}
		e.cfg.Logger.Info("lost the job lease: another relay runs the scheduled jobs", attrs...)
	}
	if e.cfg.OnChange != nil {
		e.cfg.OnChange(leader)
	}
	return was
}
