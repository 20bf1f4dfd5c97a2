package outboxprom

import (
	"cmp"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox"
)

// TenantMode says how TenantMetrics labels the tenants' series.
type TenantMode string

// Tenant modes.
const (
	// TenantPerTenant gives every tenant its own series, schema label the
	// tenant's schema: about 130 series per tenant (docs/observability.md).
	TenantPerTenant TenantMode = "per-tenant"
	// TenantAggregate sums every tenant of the database into one set of
	// relay series with schema label AggregateSchema, and leaves the table
	// gauges out: for fleets of thousands of tenants.
	TenantAggregate TenantMode = "aggregate"
)

// AggregateSchema is the schema label of the series TenantAggregate sums
// the tenants into.
const AggregateSchema = "*"

// ParseTenantMode parses per-tenant or aggregate; empty is per-tenant.
func ParseTenantMode(s string) (TenantMode, error) {
	switch TenantMode(s) {
	case "", TenantPerTenant:
		return TenantPerTenant, nil
	case TenantAggregate:
		return TenantAggregate, nil
	}
	return "", fmt.Errorf("unknown tenant metrics mode %q: use per-tenant or aggregate", s)
}

// TenantConfig configures TenantMetrics.
type TenantConfig struct {
	// Registerer is where the metrics are registered. Defaults to a new
	// registry of their own.
	Registerer prometheus.Registerer
	// DB, when set, feeds each tenant's table gauges (outbox_events,
	// outbox_oldest_pending_age_seconds, the health gauges) in per-tenant
	// mode, one sample per tenant per SampleInterval on a scrape.
	DB outbox.Database
	// Database is the value of every series' database label (host:port/name,
	// never credentials); empty leaves the label out.
	Database string
	// Sink is the relay series' sink label, as Config.Sink.
	Sink string
	// Mode is per-tenant series or one aggregate. Defaults to
	// TenantPerTenant.
	Mode TenantMode
	// SampleInterval and SampleTimeout are as in Config.
	SampleInterval time.Duration
	SampleTimeout  time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// TenantMetrics is the Prometheus metrics of outbox.Tenants: an
// outbox.TenantObserver to put in TenantsConfig.Observers. In per-tenant
// mode each tenant's relay gets Metrics of its own, schema label its
// schema, registered when its relay starts and unregistered when it stops
// (a removed tenant's series go away); in aggregate mode every tenant's
// relay shares one Metrics, schema label AggregateSchema. It is safe for
// concurrent use.
type TenantMetrics struct {
	cfg TenantConfig
	agg *Metrics // aggregate mode

	mu      sync.Mutex
	tenants map[string]*tenantEntry
	up      bool
}

type tenantEntry struct {
	m    *Metrics
	refs int // relays of the tenant running (one, or two while one stops)
}

// NewTenants returns TenantMetrics registered on cfg.Registerer.
func NewTenants(cfg TenantConfig) (*TenantMetrics, error) {
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	mode, err := ParseTenantMode(string(cfg.Mode))
	if err != nil {
		return nil, &outbox.ConfigError{Field: "Mode", Err: err}
	}
	cfg.Mode = mode
	t := &TenantMetrics{cfg: cfg, tenants: map[string]*tenantEntry{}}
	if mode == TenantAggregate {
		m, err := New(t.config(AggregateSchema))
		if err != nil {
			return nil, err
		}
		t.agg = m
	}
	return t, nil
}

func (t *TenantMetrics) config(schema string) Config {
	c := Config{Registerer: t.cfg.Registerer, Schema: schema, Database: t.cfg.Database, Sink: t.cfg.Sink,
		SampleInterval: t.cfg.SampleInterval, SampleTimeout: t.cfg.SampleTimeout, Logger: t.cfg.Logger}
	if t.cfg.DB != nil && schema != AggregateSchema {
		c.Manager = outbox.NewManager(t.cfg.DB, outbox.ManagerConfig{Schema: schema})
	}
	return c
}

// TenantHooks returns the Metrics of schema's relay, registering them on
// first use. It implements outbox.TenantObserver.
func (t *TenantMetrics) TenantHooks(schema string) []outbox.Hook {
	if t.agg != nil {
		return []outbox.Hook{t.agg}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.tenants[schema]
	if e == nil {
		m, err := New(t.config(schema))
		if err != nil {
			// Only a clash with series registered by someone else gets
			// here: the tenant is served without metrics rather than not
			// at all.
			t.cfg.Logger.Warn("tenant metrics not registered; the tenant is served without them",
				slog.String("tenant", schema), slog.String("error", err.Error()))
			return nil
		}
		e = &tenantEntry{m: m}
		t.tenants[schema] = e
	}
	e.refs++
	e.m.SetRelayUp(t.up)
	return []outbox.Hook{e.m}
}

// TenantStopped unregisters schema's series once its last relay stopped.
// It implements outbox.TenantObserver.
func (t *TenantMetrics) TenantStopped(schema string) {
	if t.agg != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.tenants[schema]
	if e == nil {
		return
	}
	if e.refs--; e.refs <= 0 {
		e.m.Unregister()
		delete(t.tenants, schema)
	}
}

// SetRelayUp sets outbox_relay_up of every tenant's series (and of those
// registered later) as Metrics.SetRelayUp does.
func (t *TenantMetrics) SetRelayUp(up bool) {
	if t.agg != nil {
		t.agg.SetRelayUp(up)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.up = up
	for _, e := range t.tenants {
		e.m.SetRelayUp(up)
	}
}

// Registerer is where the metrics are registered.
func (t *TenantMetrics) Registerer() prometheus.Registerer { return t.cfg.Registerer }

var _ outbox.TenantObserver = (*TenantMetrics)(nil)
