package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/outboxkit/outbox/internal/driver"
)

// Tenants defaults; TenantsConfig.WithDefaults fills zero fields with them.
const (
	// TenantRefreshDefault is how often Tenants discovers tenant schemas
	// again.
	TenantRefreshDefault = 30 * time.Second
	// TenantScanIntervalDefault is how often Tenants asks the database
	// which tenants have due events.
	TenantScanIntervalDefault = 250 * time.Millisecond
	// TenantIdlePollDefault is the slowest fallback poll of an idle
	// tenant, and the interval of its lease rescue and heartbeat.
	TenantIdlePollDefault = time.Minute
	// tenantIdlePollPerTenant stretches the idle poll as tenants grow
	// in number, so that idle tenants cost the database a bounded number
	// of statements per second however many there are.
	tenantIdlePollPerTenant = 60 * time.Millisecond
	// tenantScanChunk is how many tenants one due scan statement checks.
	tenantScanChunk = 250
)

// TenantsConfig configures Tenants.
type TenantsConfig struct {
	// Relay is the configuration of every tenant's relay. Tenants sets
	// Schema and Tenant to the tenant's schema and Database to Database,
	// serves Listen itself on one connection (a tenant relay never holds
	// one), and stretches PollInterval, RescueInterval and
	// HeartbeatInterval to the idle poll (see IdlePoll).
	Relay RelayConfig
	// Schemas is a glob over schema names: * matches any run of
	// characters, ? any one character, everything else itself. Every
	// matching schema that holds outbox_events (and on which the role has
	// USAGE) is a tenant. Exactly one of Schemas and Query is required.
	Schemas string
	// Query is a SELECT whose first column names the tenant schemas, such
	// as SELECT schema_name FROM public.tenants WHERE status = 'ACTIVE'.
	// It runs in a read-only transaction on every refresh; a named schema
	// without outbox_events is skipped with a warning (migrate it).
	Query string
	// Refresh is how often tenants are discovered again: a new tenant is
	// served, and a removed one stopped after its in-flight batches
	// settle, within it. Defaults to TenantRefreshDefault.
	Refresh time.Duration
	// ScanInterval is how often one statement per 250 tenants asks which
	// tenants have due events, and wakes their relays: the wake-up for
	// writers that do not notify (plain SQL INSERTs from any language).
	// The same statement finds expired leases (a relay died holding
	// events), which the tenant's relay then rescues at once. Defaults to
	// TenantScanIntervalDefault.
	ScanInterval time.Duration
	// IdlePoll is the least interval of an idle tenant's own fallback
	// poll, lease rescue and heartbeat; with many tenants it is stretched
	// to 60ms per tenant, so that idle tenants cost a bounded number of
	// statements per second (docs/tenants.md). Defaults to
	// TenantIdlePollDefault.
	IdlePoll time.Duration
	// Database labels the database in Event.Database, logs and metrics
	// when one process serves several databases (host/name, never
	// credentials); empty for one database, which leaves Event.UniqueID
	// qualified by the tenant alone.
	Database string
	// Logger receives the supervisor's logs and, with a tenant attribute,
	// the tenant relays'. Defaults to Relay.Logger, else slog.Default().
	Logger *slog.Logger
	// Observers give each tenant's relay hooks of its own (such as
	// per-tenant metrics, outboxprom.TenantMetrics), beside Relay.Hooks,
	// which every tenant's relay shares.
	Observers []TenantObserver
}

// TenantObserver makes the hooks of each tenant's relay: observability
// that keeps tenants apart, such as metrics labelled by schema.
type TenantObserver interface {
	// TenantHooks returns the hooks of tenant schema's relay; Tenants
	// calls it before starting the relay.
	TenantHooks(schema string) []Hook
	// TenantStopped says the relay of schema has stopped (the tenant was
	// removed, or its relay did not start): drop what TenantHooks made.
	// A tenant discovered again gets TenantHooks again.
	TenantStopped(schema string)
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c TenantsConfig) WithDefaults() TenantsConfig {
	c.Refresh = cmp.Or(c.Refresh, TenantRefreshDefault)
	c.ScanInterval = cmp.Or(c.ScanInterval, TenantScanIntervalDefault)
	c.IdlePoll = cmp.Or(c.IdlePoll, TenantIdlePollDefault)
	if c.Logger == nil {
		c.Logger = cmp.Or(c.Relay.Logger, slog.Default())
	}
	return c
}

// Validate reports the first invalid field as a *ConfigError.
func (c TenantsConfig) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case c.Schemas == "" && c.Query == "":
		return bad("Schemas", "and Query are both empty: set a glob of tenant schemas, such as s_*, or a query that lists them")
	case c.Schemas != "" && c.Query != "":
		return bad("Query", "is set with Schemas: use one way of discovering tenants")
	case c.Refresh <= 0:
		return bad("Refresh", "is %v: use a positive duration", c.Refresh)
	case c.ScanInterval <= 0:
		return bad("ScanInterval", "is %v: use a positive duration", c.ScanInterval)
	case c.IdlePoll <= 0:
		return bad("IdlePoll", "is %v: use a positive duration", c.IdlePoll)
	case c.Relay.Schema != "" && c.Relay.Schema != SchemaDefault:
		return bad("Relay.Schema", "is %q: Tenants sets each relay's schema to its tenant; leave it empty", c.Relay.Schema)
	}
	if err := checkText(c.Schemas, false); err != nil {
		return bad("Schemas", "%v", err)
	}
	cfg := c.Relay
	cfg.Schema = "tenant"
	return cfg.WithDefaults().Validate()
}

// Tenants serves every tenant schema of one database with one relay per
// schema, all on the database's one pool: schema-per-tenant outboxes
// (docs/tenants.md). It discovers the tenants (TenantsConfig.Schemas or
// Query) at Start and every Refresh, starts a relay for each new one and
// stops the relay of each one gone.
//
// Each tenant's relay claims on its own, so a tenant with a backlog never
// holds another's events back by more than the pool's queue (connections
// are handed out first come, first served). Idle tenants cost little: one
// statement per 250 tenants every ScanInterval finds the tenants with due
// events (or expired leases to rescue) and wakes their relays, a LISTEN
// connection (RelayConfig.Listen) wakes them on the writers'
// notifications, and each idle relay polls, rescues and beats only every
// IdlePoll.
//
// Events carry their tenant (Event.Tenant, the schema) to the sink, and
// Event.UniqueID, the id brokers drop duplicates on, is qualified by it.
// Any number of processes may run Tenants over the same database: each
// tenant's relays share its table as relays always do.
type Tenants struct {
	cfg  TenantsConfig
	db   Database
	disc driver.TenantDiscoverer
	log  *slog.Logger
	// relayLog is the base of the tenant relays' loggers.
	relayLog *slog.Logger

	mu      sync.Mutex
	relays  map[string]*Relay
	missing map[string]bool // schemas the query named without an outbox, warned once
	started bool
	stop    chan struct{}
	done    chan struct{}
	// stopping counts the relays of removed tenants still stopping.
	stopping sync.WaitGroup
}

// ErrTenantsUnsupported is returned by NewTenants for a database without
// schemas to discover (SQLite).
var ErrTenantsUnsupported = errors.New("tenant discovery needs PostgreSQL schemas or MySQL databases")

// NewTenants returns the tenant supervisor for db. It checks cfg but does
// not touch the database until Start.
func NewTenants(db Database, cfg TenantsConfig) (*Tenants, error) {
	if db == nil {
		return nil, &ConfigError{Field: "db", Err: errors.New("is nil")}
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	disc, ok := db.Driver(SchemaDefault).(driver.TenantDiscoverer)
	if !ok {
		return nil, fmt.Errorf("outbox: tenants: %w: SQLite has none: a SQLite file holds one outbox (one schema); run one relay per file", ErrTenantsUnsupported)
	}
	relayLog := cfg.Logger
	if cfg.Database != "" {
		relayLog = relayLog.With(slog.String("database", cfg.Database))
	}
	log := relayLog.With(slog.String("component", "outbox.tenants"))
	return &Tenants{cfg: cfg, db: db, disc: disc, log: log, relayLog: relayLog, relays: map[string]*Relay{}, missing: map[string]bool{}}, nil
}

// Start discovers the tenants, starts their relays and the supervisor's
// goroutines, which run until Stop. It fails when the first discovery
// fails (a bad query, no database); a tenant whose relay cannot start is
// logged and tried again at the next refresh.
func (t *Tenants) Start(ctx context.Context) error {
	t.mu.Lock()
	if t.started {
		t.mu.Unlock()
		return errors.New("outbox: tenants: already started")
	}
	t.started = true
	t.stop = make(chan struct{})
	t.done = make(chan struct{})
	t.mu.Unlock()
	if err := t.refresh(ctx); err != nil {
		t.mu.Lock()
		t.started = false
		t.mu.Unlock()
		if stopErr := t.stopAll(ctx); stopErr != nil {
			return fmt.Errorf("outbox: tenants: discover: %w (and stopping the relays started so far: %w)", err, stopErr)
		}
		return fmt.Errorf("outbox: tenants: discover: %w", err)
	}
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { t.refreshLoop(work) })
	wg.Go(func() { t.scanLoop(work) })
	if t.cfg.Relay.Listen && !t.cfg.Relay.PgBouncer {
		wg.Go(func() {
			t.disc.ListenSchemas(work, t.Wake, t.wakeAll, func(err error) {
				t.log.Warn("listen for new events failed; reconnecting", slog.String("error", err.Error()))
			})
		})
	}
	go func() {
		<-t.stop
		cancel()
		wg.Wait()
		t.disc.CloseScan()
		close(t.done)
	}()
	t.log.Info("tenants started", slog.Int("tenants", len(t.Schemas())), slog.Duration("refresh", t.cfg.Refresh),
		slog.Duration("scan_interval", t.cfg.ScanInterval))
	return nil
}

// Stop stops discovery and every tenant's relay, each as Relay.Stop does,
// all at once, and returns when they are stopped or ctx ends.
func (t *Tenants) Stop(ctx context.Context) error {
	t.mu.Lock()
	if !t.started {
		t.mu.Unlock()
		return nil
	}
	t.started = false
	close(t.stop)
	done := t.done
	t.mu.Unlock()
	<-done
	err := t.stopAll(ctx)
	t.stopping.Wait()
	t.log.Info("tenants stopped")
	return err
}

// Run starts the supervisor and blocks until ctx ends, then stops it
// within the relays' ShutdownTimeout. It returns an error only when it
// cannot start.
func (t *Tenants) Run(ctx context.Context) error {
	if err := t.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.Relay.WithDefaults().ShutdownTimeout)
	defer cancel()
	_ = t.Stop(stopCtx)
	return nil
}

// Schemas returns the tenants served now, sorted.
func (t *Tenants) Schemas() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.relays))
	for s := range t.relays {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Wake makes the relay of tenant schema claim at once, as Relay.Wake
// does; a writer in the same process calls it after committing. It does
// nothing for a schema that is not served.
func (t *Tenants) Wake(schema string) {
	t.mu.Lock()
	r := t.relays[schema]
	t.mu.Unlock()
	if r != nil {
		r.Wake()
	}
}

func (t *Tenants) wakeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.relays {
		r.Wake()
	}
}

// stopAll stops every tenant's relay at once.
func (t *Tenants) stopAll(ctx context.Context) error {
	t.mu.Lock()
	relays := t.relays
	t.relays = map[string]*Relay{}
	t.mu.Unlock()
	var (
		wg   sync.WaitGroup
		errs = make(chan error, len(relays))
	)
	for _, r := range relays {
		wg.Go(func() {
			errs <- r.Stop(ctx)
			t.stopped(r.cfg.Tenant)
		})
	}
	wg.Wait()
	close(errs)
	var err error
	for e := range errs {
		err = cmp.Or(err, e)
	}
	return err
}

// discover returns the tenant schemas: those holding an outbox that match
// the glob, or those the query names that hold one.
func (t *Tenants) discover(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.Relay.WithDefaults().DBTimeout)
	defer cancel()
	return discoverTenants(ctx, t.disc, t.cfg.Schemas, t.cfg.Query, t.warnMissing)
}

// DiscoverTenants returns, sorted, the tenant schemas of db that hold an
// outbox, as Tenants finds them: those matching the glob schemas, or those
// the SELECT query names in its first column.
func DiscoverTenants(ctx context.Context, db Database, schemas, query string) ([]string, error) {
	disc, ok := db.Driver(SchemaDefault).(driver.TenantDiscoverer)
	if !ok {
		return nil, fmt.Errorf("outbox: tenants: %w: this database has none", ErrTenantsUnsupported)
	}
	return discoverTenants(ctx, disc, schemas, query, func(string) {})
}

func discoverTenants(ctx context.Context, disc driver.TenantDiscoverer, schemas, query string, missing func(string)) ([]string, error) {
	have, err := disc.OutboxSchemas(ctx)
	if err != nil {
		return nil, err
	}
	if query == "" {
		return slices.DeleteFunc(have, func(s string) bool { return !MatchGlob(schemas, s) }), nil
	}
	named, err := disc.QuerySchemas(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("tenant query: %w", err)
	}
	hold := make(map[string]bool, len(have))
	for _, s := range have {
		hold[s] = true
	}
	var out []string
	for _, s := range named {
		if hold[s] {
			out = append(out, s)
			continue
		}
		missing(s)
	}
	slices.Sort(out)
	return out, nil
}

// warnMissing warns once about a schema the query names without an
// outbox.
func (t *Tenants) warnMissing(s string) {
	t.mu.Lock()
	warned := t.missing[s]
	t.missing[s] = true
	t.mu.Unlock()
	if !warned {
		t.log.Warn("the tenant query names a schema without an outbox table (or without USAGE for this role); it is served once migrated: outbox migrate --tenant-query",
			slog.String("tenant", s))
	}
}

// refresh discovers the tenants, starts relays for new ones and stops the
// relays of those gone.
func (t *Tenants) refresh(ctx context.Context) error {
	names, err := t.discover(ctx)
	if err != nil {
		return err
	}
	want := make(map[string]bool, len(names))
	for _, s := range names {
		want[s] = true
	}
	t.mu.Lock()
	var gone []*Relay
	for s, r := range t.relays {
		if !want[s] {
			delete(t.relays, s)
			gone = append(gone, r)
			t.log.Info("tenant removed; stopping its relay", slog.String("tenant", s))
		}
	}
	var added []string
	for _, s := range names {
		if t.relays[s] == nil {
			added = append(added, s)
		}
	}
	t.mu.Unlock()
	for _, r := range gone {
		t.stopping.Go(func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ShutdownTimeout)
			defer cancel()
			_ = r.Stop(stopCtx)
			t.stopped(r.cfg.Tenant)
		})
	}
	idle := max(t.cfg.IdlePoll, time.Duration(len(names))*tenantIdlePollPerTenant)
	for _, s := range added {
		r, err := t.startRelay(ctx, s, idle)
		if err != nil {
			t.log.Warn("tenant relay did not start; trying again at the next refresh", slog.String("tenant", s), slog.String("error", err.Error()))
			continue
		}
		t.mu.Lock()
		if !t.started {
			t.mu.Unlock()
			_ = r.Stop(ctx)
			t.stopped(s)
			return nil
		}
		t.relays[s] = r
		t.mu.Unlock()
		if len(added) < 20 {
			t.log.Info("tenant served", slog.String("tenant", s))
		}
	}
	if len(added) >= 20 {
		t.log.Info("tenants served", slog.Int("added", len(added)), slog.Int("tenants", len(t.Schemas())))
	}
	return nil
}

// startRelay starts the relay of tenant schema s.
func (t *Tenants) startRelay(ctx context.Context, s string, idle time.Duration) (*Relay, error) {
	cfg := t.cfg.Relay
	cfg.Schema, cfg.Tenant, cfg.Database = s, s, t.cfg.Database
	cfg.Listen = false
	// Up to half again as long, at random: relays started together drift
	// apart instead of polling the database all in the same second.
	idle += rand.N(idle/2 + 1)
	cfg.PollInterval = max(cfg.PollInterval, idle)
	cfg.RescueInterval = max(cfg.RescueInterval, idle)
	if cfg.HeartbeatInterval >= 0 {
		cfg.HeartbeatInterval = max(cfg.HeartbeatInterval, idle)
	}
	cfg.Logger = t.relayLog.With(slog.String("tenant", s))
	if len(t.cfg.Observers) > 0 {
		cfg.Hooks = slices.Clone(cfg.Hooks)
		for _, o := range t.cfg.Observers {
			cfg.Hooks = append(cfg.Hooks, o.TenantHooks(s)...)
		}
	}
	r, err := NewRelay(t.db, cfg)
	if err != nil {
		t.stopped(s)
		return nil, err
	}
	if err := r.Start(ctx); err != nil {
		t.stopped(s)
		return nil, err
	}
	return r, nil
}

// stopped tells the observers that the relay of schema has stopped.
func (t *Tenants) stopped(schema string) {
	for _, o := range t.cfg.Observers {
		o.TenantStopped(schema)
	}
}

func (t *Tenants) refreshLoop(ctx context.Context) {
	tick := time.NewTicker(t.cfg.Refresh)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := t.refresh(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			if !failing {
				t.log.Warn("tenant discovery failed; the tenants found before are still served", slog.String("error", err.Error()))
			}
			failing = true
			continue
		}
		if failing {
			t.log.Info("tenant discovery resumed")
			failing = false
		}
	}
}

// scanLoop wakes, every ScanInterval, the relays of the tenants that have
// due events: the wake-up for writers that do not notify.
func (t *Tenants) scanLoop(ctx context.Context) {
	tick := time.NewTicker(t.cfg.ScanInterval)
	defer tick.Stop()
	timeout := t.cfg.Relay.WithDefaults().DBTimeout
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		schemas := t.Schemas()
		for start := 0; start < len(schemas); start += tenantScanChunk {
			chunk := schemas[start:min(start+tenantScanChunk, len(schemas))]
			scanCtx, cancel := context.WithTimeout(ctx, timeout)
			due, expired, err := t.disc.DueSchemas(scanCtx, chunk)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				// A tenant dropped since the last refresh fails its
				// chunk; so does a database that is down. Wake the chunk:
				// each relay then finds out for itself.
				t.log.Debug("due scan failed; waking its tenants", slog.String("error", err.Error()))
				due = chunk
			}
			for _, s := range due {
				t.Wake(s)
			}
			// A relay died holding these tenants' events: rescue them now
			// rather than at the tenant relay's slow rescue interval.
			for _, s := range expired {
				t.mu.Lock()
				r := t.relays[s]
				t.mu.Unlock()
				if r != nil {
					if _, err := r.rescue(ctx, 1000); err != nil && ctx.Err() == nil {
						t.log.Debug("lease rescue failed", slog.String("tenant", s), slog.String("error", err.Error()))
					}
				}
			}
		}
	}
}

// ListTenants returns, sorted, the tenant schemas of db whether or not they
// hold an outbox yet, for migrating them: the schemas whose names match the
// glob schemas (other than the database's own catalogs), or those the
// SELECT query names in its first column.
func ListTenants(ctx context.Context, db Database, schemas, query string) ([]string, error) {
	disc, ok := db.Driver(SchemaDefault).(driver.TenantDiscoverer)
	if !ok {
		return nil, fmt.Errorf("outbox: tenants: %w: this database has none", ErrTenantsUnsupported)
	}
	if query != "" {
		names, err := disc.QuerySchemas(ctx, query)
		if err != nil {
			return nil, fmt.Errorf("tenant query: %w", err)
		}
		slices.Sort(names)
		return names, nil
	}
	all, err := disc.UserSchemas(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(s string) bool { return !MatchGlob(schemas, s) }), nil
}

// MatchGlob reports whether name matches pattern, where * matches any run
// of characters (none included), ? any one character, and every other
// character itself.
func MatchGlob(pattern, name string) bool {
	p, n := []rune(pattern), []rune(name)
	// Iterative matching with one backtrack point: linear for patterns
	// without *, quadratic at worst.
	pi, ni, star, mark := 0, 0, -1, 0
	for ni < len(n) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == n[ni]):
			pi++
			ni++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, ni
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			ni = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
