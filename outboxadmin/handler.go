// Package outboxadmin is the outbox's admin HTTP API and web dashboard: an
// http.Handler to mount inside your own server (or run with `outbox admin`).
//
// The JSON API under BasePath + "/api/" shows counts, lag and throughput over
// time, searches events and shows one in full, lists the running relays
// (idle ones too, from their heartbeat rows) with their leases, and
// retries, replays and discards events or changes an event's max
// attempts. The dashboard at BasePath + "/" is plain HTML, CSS and
// JavaScript embedded in the binary: it loads nothing from elsewhere.
//
// The exported …JSON types are the API's wire format: a Go client may
// decode into them, and the outbox command's --json outputs are built from
// the same types (NewEventJSON, NewCountsJSON, NewHealthJSON,
// NewRelaysJSON), so a key means one thing in both; docs/admin.md lists
// which endpoint answers which.
//
// Security: set AuthToken or BasicAuth unless your own middleware
// authenticates requests; every action is a POST with a JSON body and is
// refused when it comes from another origin (net/http's
// CrossOriginProtection), and is logged with who made it. Responses carry a
// strict Content-Security-Policy. Without AuthToken or BasicAuth the handler
// answers only requests whose Host is localhost, a loopback address or an
// entry of Config.AllowedHosts, so a page using DNS rebinding cannot reach
// it. The handler knows nothing of the database URL, so no page or answer
// can show its password.
package outboxadmin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
)

// Handler serves the admin API and dashboard. Make one with New.
type Handler struct {
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	cop     *http.CrossOriginProtection
	sampler *sampler
	tenants *tenants // with Config.Tenants

	tokenSum, userSum, passwordSum [sha256.Size]byte

	mu      sync.Mutex
	stop    context.CancelFunc
	stopped chan struct{}
}

// New returns a handler for cfg. It starts nothing: the charts get a point
// whenever the dashboard asks for the stats and the last point is older than
// SampleInterval. Call Start to sample in the background, so the charts
// cover the last History even when nobody watched.
func New(cfg Config) (*Handler, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Handler{
		cfg: cfg,
		log: cfg.Logger.With(slog.String("component", "outboxadmin")),
		mux: http.NewServeMux(),
		cop: http.NewCrossOriginProtection(),
	}
	h.sampler = newSampler(cfg.Manager, cfg.SampleInterval, cfg.History)
	if cfg.Tenants != nil {
		h.tenants = &tenants{children: map[string]*Handler{}}
	}
	h.tokenSum = sha256.Sum256([]byte(cfg.AuthToken))
	if cfg.BasicAuth != nil {
		h.userSum = sha256.Sum256([]byte(cfg.BasicAuth.User))
		h.passwordSum = sha256.Sum256([]byte(cfg.BasicAuth.Password))
	}
	h.cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.log.Warn("cross-origin request refused", slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.String("remote_addr", r.RemoteAddr), slog.String("origin", r.Header.Get("Origin")))
		writeError(w, http.StatusForbidden, "cross-origin request refused: send actions from the dashboard's own origin")
	}))
	h.routes()
	return h, nil
}

// Start samples the table every SampleInterval until Stop. ctx is used for
// its values only.
func (h *Handler) Start(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop != nil {
		return errors.New("outboxadmin: already started")
	}
	if h.tenants != nil {
		// Each tenant's charts get a point when the dashboard asks.
		return nil
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.stop, h.stopped = cancel, make(chan struct{})
	go func() {
		defer close(h.stopped)
		h.sampler.run(ctx, h.cfg.QueryTimeout, func(err error) {
			h.log.Warn("sample the outbox table", slog.Any("error", err))
		})
	}()
	return nil
}

// Stop ends the background sampling started by Start and waits for it, or
// for ctx to end. It does not affect requests being served.
func (h *Handler) Stop(ctx context.Context) error {
	h.mu.Lock()
	stop, stopped := h.stop, h.stopped
	h.stop = nil
	h.mu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ServeHTTP serves the dashboard and the API under BasePath.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "no-referrer")
	if !h.checkHost(w, r) || !h.checkParams(w, r) {
		return
	}
	if h.tenants != nil && h.isTenantAPI(r.URL.Path) {
		h.requireAuth(http.HandlerFunc(h.serveTenantAPI)).ServeHTTP(w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// principalKey keys the authenticated principal in a request's context.
type principalKey struct{}

// authenticate checks the request's credentials and returns who it is.
func (h *Handler) authenticate(r *http.Request) (string, bool) {
	tokenSet, basicSet := h.cfg.AuthToken != "", h.cfg.BasicAuth != nil
	principal := "anonymous"
	if tokenSet || basicSet {
		principal = ""
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && tokenSet {
			sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
			if subtle.ConstantTimeCompare(sum[:], h.tokenSum[:]) == 1 {
				principal = "token"
			}
		} else if user, password, ok := r.BasicAuth(); ok && basicSet {
			u, p := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
			// Both comparisons always run, so timing tells nothing.
			if subtle.ConstantTimeCompare(u[:], h.userSum[:])&subtle.ConstantTimeCompare(p[:], h.passwordSum[:]) == 1 {
				principal = user
			}
		}
		if principal == "" {
			return "", false
		}
	}
	if h.cfg.Principal != nil {
		if p := h.cfg.Principal(r); p != "" {
			principal = p
		}
	}
	return principal, true
}

// requireAuth lets authenticated requests through to next.
func (h *Handler) requireAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		principal, ok := h.authenticate(r)
		if !ok {
			h.log.Warn("unauthenticated request refused", slog.String("method", r.Method),
				slog.String("path", r.URL.Path), slog.String("remote_addr", r.RemoteAddr))
			if h.cfg.BasicAuth != nil {
				w.Header().Set("WWW-Authenticate", `Basic realm="outbox admin", charset="UTF-8"`)
			} else {
				w.Header().Set("WWW-Authenticate", `Bearer realm="outbox admin"`)
			}
			writeError(w, http.StatusUnauthorized, "authentication required: send the admin token as \"Authorization: Bearer <token>\" or the basic-auth user and password")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, principal)))
	})
}

// principalOf returns who made an authenticated request.
func principalOf(r *http.Request) string {
	p, _ := r.Context().Value(principalKey{}).(string)
	return p
}

// mutating wraps an action: authenticated, same-origin, a JSON body, and
// refused when the handler is read-only.
func (h *Handler) mutating(next http.HandlerFunc) http.Handler {
	return h.requireAuth(h.cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.cfg.ReadOnly {
			writeError(w, http.StatusForbidden, "the admin API is read-only: run it without ReadOnly (outbox admin without --read-only) to change events")
			return
		}
		ct := r.Header.Get("Content-Type")
		if mt, _, _ := strings.Cut(ct, ";"); strings.TrimSpace(strings.ToLower(mt)) != "application/json" {
			// A cross-site HTML form cannot send this content type.
			writeError(w, http.StatusUnsupportedMediaType, "send the action's parameters as a JSON body with Content-Type: application/json")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		next(w, r)
	})))
}

// audit logs an action with who made it.
func (h *Handler) audit(r *http.Request, action string, attrs ...slog.Attr) {
	attrs = append([]slog.Attr{
		slog.String("action", action),
		slog.String("principal", principalOf(r)),
		slog.String("remote_addr", r.RemoteAddr),
	}, attrs...)
	h.log.LogAttrs(r.Context(), slog.LevelInfo, "admin action", attrs...)
}
