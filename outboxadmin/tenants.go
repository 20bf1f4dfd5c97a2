package outboxadmin

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// tenantsRediscover is how stale the known tenants may be before a request
// naming a tenant that is not among them discovers them again: a tenant
// created a moment ago is found, and a stream of requests naming unknown
// tenants does not run discovery each time.
const tenantsRediscover = 5 * time.Second

// TenantCountsJSON is one tenant's counts in GET /api/tenants: the
// schema and CountsJSON of its outbox (as outbox stats --tenant-schemas
// --json gives them).
type TenantCountsJSON struct {
	Schema string `json:"schema"`
	CountsJSON
}

// TenantsJSON is GET /api/tenants: every tenant with its counts, the most
// lagging (oldest pending event) first.
type TenantsJSON struct {
	Tenants []TenantCountsJSON `json:"tenants"`
}

// tenants is the per-tenant state of a handler serving tenants: one
// child handler per tenant viewed, made on first use, whose Manager works
// on the tenant's schema and whose charts are its own.
type tenants struct {
	mu       sync.Mutex
	known    map[string]bool
	at       time.Time // when known was discovered
	children map[string]*Handler
}

// discover runs Config.Tenants and remembers its answer.
func (h *Handler) discover(ctx context.Context) ([]string, error) {
	schemas, err := h.cfg.Tenants(ctx)
	if err != nil {
		return nil, err
	}
	known := make(map[string]bool, len(schemas))
	for _, s := range schemas {
		known[s] = true
	}
	t := h.tenants
	t.mu.Lock()
	t.known, t.at = known, time.Now()
	// A tenant gone from discovery loses its child, and its charts.
	for s := range t.children {
		if !known[s] {
			delete(t.children, s)
		}
	}
	t.mu.Unlock()
	return schemas, nil
}

// tenant returns the child handler of a discovered tenant, or nil when
// schema is not one.
func (h *Handler) tenant(ctx context.Context, schema string) (*Handler, error) {
	t := h.tenants
	t.mu.Lock()
	ok, stale := t.known[schema], time.Since(t.at) > tenantsRediscover
	t.mu.Unlock()
	if !ok && stale {
		if _, err := h.discover(ctx); err != nil {
			return nil, err
		}
		t.mu.Lock()
		ok = t.known[schema]
		t.mu.Unlock()
	}
	if !ok {
		return nil, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.children[schema]; c != nil {
		return c, nil
	}
	cfg := h.cfg
	cfg.Tenants, cfg.TenantManager, cfg.Consumers = nil, nil, nil
	cfg.Manager = h.cfg.TenantManager(schema)
	cfg.Logger = h.cfg.Logger.With(slog.String("tenant", schema))
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	t.children[schema] = c
	return c, nil
}

// serveTenantAPI sends an API request other than /api/tenants and
// /api/info to the handler of the tenant its tenant query parameter names.
// The tenant's handler checks the request again as its own routes do
// (authentication, origin, read-only).
func (h *Handler) serveTenantAPI(w http.ResponseWriter, r *http.Request) {
	schema := r.URL.Query().Get("tenant")
	if schema == "" {
		writeError(w, http.StatusBadRequest, "missing tenant: name the tenant schema with ?tenant=NAME (GET /api/tenants lists them)")
		return
	}
	ctx, cancel := h.dbContext(r)
	c, err := h.tenant(ctx, schema)
	cancel()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if c == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no tenant %q: GET /api/tenants lists the tenant schemas", schema))
		return
	}
	c.mux.ServeHTTP(w, r)
}

// isTenantAPI reports whether path is an API endpoint that works on one
// tenant's schema.
func (h *Handler) isTenantAPI(path string) bool {
	rest, ok := strings.CutPrefix(path, h.cfg.basePath()+"/api/")
	return ok && rest != "tenants" && rest != "info"
}

// tenantCounts is GET /api/tenants: every tenant's counts
// (Manager.TenantStats), sorted by lag.
func (h *Handler) tenantCounts(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Tenants == nil {
		writeJSON(w, http.StatusOK, TenantsJSON{Tenants: []TenantCountsJSON{}})
		return
	}
	ctx, cancel := h.dbContext(r)
	defer cancel()
	schemas, err := h.discover(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := TenantsJSON{Tenants: make([]TenantCountsJSON, 0, len(schemas))}
	if len(schemas) > 0 {
		// Any tenant's Manager counts them all, in one statement per few
		// hundred tenants on PostgreSQL.
		counts, err := h.cfg.TenantManager(schemas[0]).TenantStats(ctx, schemas)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		for _, st := range counts {
			out.Tenants = append(out.Tenants, TenantCountsJSON{Schema: st.Schema, CountsJSON: NewCountsJSON(st.Stats)})
		}
	}
	sort.SliceStable(out.Tenants, func(i, j int) bool {
		a, b := out.Tenants[i], out.Tenants[j]
		if a.OldestPendingAgeSeconds != b.OldestPendingAgeSeconds {
			return a.OldestPendingAgeSeconds > b.OldestPendingAgeSeconds
		}
		return a.Schema < b.Schema
	})
	writeJSON(w, http.StatusOK, out)
}
