package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox"
)

// Readiness of the relay's /readyz.
const (
	// readyCheckTimeout bounds each check of one /readyz request, well
	// inside a probe's usual 1s–5s timeout.
	readyCheckTimeout = 2 * time.Second
	// readyDatabaseTTL is how long a database check's answer is reused, so
	// probes from several sources cost at most one query per interval.
	readyDatabaseTTL = time.Second
)

// readiness answers /readyz: ready (200) while every named check passes, not
// ready (503) otherwise, with one line per check saying why. /healthz stays
// a liveness probe that answers as long as the process serves HTTP; /readyz
// tells a load balancer or Kubernetes whether this relay does its work now.
//
// Checks are a list so that each concern adds its own (add): the relay's
// running state, the database and the sink's circuit. They are all added
// before the server starts serving, so the list needs no lock.
type readiness struct {
	checks []readyCheck
	redact *redactor
}

// readyCheck is one named condition of readiness: nil means it holds. A
// soft check's failure is reported but leaves the process ready: one of
// several databases that is down holds up only its own tenants.
type readyCheck struct {
	name  string
	check func(context.Context) error
	soft  bool
}

// add appends a check; checks run in the order they were added, each
// within readyCheckTimeout.
func (r *readiness) add(name string, check func(context.Context) error) {
	r.checks = append(r.checks, readyCheck{name: name, check: check})
}

func (r *readiness) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var body strings.Builder
	ready := true
	for _, c := range r.checks {
		// Not cut short by a prober that hangs up: a cached check's answer
		// is shared with the next probes.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), readyCheckTimeout)
		err := c.check(ctx)
		cancel()
		if err != nil {
			note := ""
			if c.soft {
				note = " (its tenants wait; the other databases' are served)"
			} else {
				ready = false
			}
			// One line per check, with no secret a driver error may quote.
			fmt.Fprintf(&body, "%s: %s%s\n", c.name, r.redact.String(oneLine(err.Error())), note)
			continue
		}
		fmt.Fprintf(&body, "%s: ok\n", c.name)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if !ready {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not ready\n" + body.String()))
		return
	}
	_, _ = w.Write([]byte("ready\n" + body.String()))
}

// cachedCheck runs check at most once per ttl and shares its answer:
// callers that arrive while it runs wait for it rather than start another.
func cachedCheck(ttl time.Duration, check func(context.Context) error) func(context.Context) error {
	var (
		mu   sync.Mutex
		at   time.Time
		last error
	)
	return func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && time.Since(at) < ttl {
			return last
		}
		last, at = check(ctx), time.Now()
		return last
	}
}

// databaseCheck is ready when the database answers a one-row query and the
// outbox table is there (Manager.Ping).
func databaseCheck(mgr *outbox.Manager) func(context.Context) error {
	return cachedCheck(readyDatabaseTTL, func(ctx context.Context) error {
		if err := mgr.Ping(ctx); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("no answer within %s", readyCheckTimeout)
			}
			return err
		}
		return nil
	})
}

// relayState is the relay behind the running check; it is set once the
// relay is built, after the listener is up.
type relayState struct {
	stopping context.Context // ends on SIGTERM or SIGINT
	relay    atomic.Pointer[outbox.Relay]
}

// sinkCheck is ready while the relay's circuit on its sink is closed: an
// unreachable sink (connection refused, DNS, TLS handshake) opens it, and
// the relay then probes the sink instead of claiming.
func (s *relayState) sinkCheck(context.Context) error {
	r := s.relay.Load()
	if r == nil {
		return nil // the relay check says "starting"
	}
	switch st := r.SinkCircuit(); st {
	case outbox.CircuitClosed:
		return nil
	default:
		return fmt.Errorf("unreachable (circuit %s; the relay probes it and resumes when it answers)", st)
	}
}

// check is ready while the relay claims events: not before it has started,
// nor once a signal asked it to stop, though in-flight batches still finish.
func (s *relayState) check(context.Context) error {
	if s.stopping.Err() != nil {
		return errors.New("stopping")
	}
	if r := s.relay.Load(); r == nil || !r.Running() {
		return errors.New("starting")
	}
	return nil
}

// tenantDatabaseReady is one database of a tenant relay as /readyz sees
// it: set once its pool is made.
type tenantDatabaseReady struct {
	db atomic.Pointer[outbox.Database]
}

// set hands the database's pool to its check.
func (r *tenantDatabaseReady) set(db outbox.Database) {
	if r != nil {
		r.db.Store(&db)
	}
}

// check is ready while the database answers tenant discovery's catalog
// query (one statement, cached for readyDatabaseTTL).
func (r *tenantDatabaseReady) check() func(context.Context) error {
	return cachedCheck(readyDatabaseTTL, func(ctx context.Context) error {
		db := r.db.Load()
		if db == nil {
			return errors.New("connecting")
		}
		if _, err := outbox.DiscoverTenants(ctx, *db, "*", ""); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("no answer within %s", readyCheckTimeout)
			}
			return err
		}
		return nil
	})
}
