package outboxadmin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
)

// Config defaults; Config.WithDefaults fills zero fields with them.
const (
	// BasePathDefault serves the dashboard at the root of the server.
	BasePathDefault = "/"
	// SampleIntervalDefault is how often the handler samples the table for
	// the dashboard's charts.
	SampleIntervalDefault = 5 * time.Second
	// HistoryDefault is how far back the charts reach.
	HistoryDefault = time.Hour
	// QueryTimeoutDefault bounds one request's database work.
	QueryTimeoutDefault = 10 * time.Second
)

// BasicAuth is a user name and password that the handler accepts with HTTP
// basic authentication.
type BasicAuth struct {
	User     string
	Password string
}

// Config configures a Handler.
type Config struct {
	// Manager runs every query and action. Required, unless Tenants is
	// set.
	Manager *outbox.Manager
	// Tenants, when set, makes the handler serve schema-per-tenant
	// outboxes (docs/tenants.md) instead of Manager's one schema: it
	// returns the tenant schemas, such as a closure over
	// outbox.DiscoverTenants, and is called again for GET /api/tenants
	// (each tenant's counts, sorted by lag) and when a request names a
	// tenant not seen for a few seconds. Every other API endpoint then
	// works on the schema its tenant query parameter names, through
	// TenantManager; the dashboard shows a tenant selector. Consumers is
	// not used with it.
	Tenants func(ctx context.Context) ([]string, error)
	// TenantManager returns the Manager of a tenant schema that Tenants
	// listed. Required with Tenants. GET /api/tenants counts every tenant
	// with one tenant's Manager.TenantStats, so the Managers must share
	// one database.
	TenantManager func(schema string) *outbox.Manager
	// Logger receives the audit log (one line per action, with who did
	// it) and errors. Defaults to slog.Default().
	Logger *slog.Logger
	// AuthToken, when set, is a bearer token that the API accepts in an
	// "Authorization: Bearer <token>" header. The dashboard asks for it
	// and keeps it for the browser tab's session.
	AuthToken string
	// BasicAuth, when set, is a user name and password that the API and
	// the dashboard accept with HTTP basic authentication; the browser
	// asks for them.
	//
	// With neither AuthToken nor BasicAuth every request is let in: use
	// that only behind authentication of your own (see Principal) or on a
	// loopback address.
	BasicAuth *BasicAuth
	// BasePath is the path the handler is mounted at, such as
	// "/admin/outbox": mount it with mux.Handle("/admin/outbox/", h).
	// Defaults to BasePathDefault.
	BasePath string
	// ReadOnly refuses every action (retry, replay, discard, max attempts)
	// and hides their buttons.
	ReadOnly bool
	// ReplaySink, when set, is the one sink the dashboard may replay
	// delivered events to (Manager.ReplayTo), for feeding a new consumer:
	// POST /api/events/replay-to-sink and the event browser's "Replay to
	// sink" button. The program that builds the handler chooses it; the
	// API never takes a sink or a URL from the request, so a browser (or a
	// stolen token) cannot make the server publish anywhere else. Nil for
	// none: the endpoint answers 404.
	ReplaySink outbox.Sink
	// ReplaySinkName names ReplaySink on the dashboard and in the audit
	// log, such as "nats://broker:4222/ORDERS"; leave credentials out.
	// Required with ReplaySink.
	ReplaySinkName string
	// Consumers, when set, reads the consumer side's backlog for GET
	// /api/consumers and the overview's Consumers panel: each consumer
	// with unprocessed messages in an inbox, such as a closure over
	// inbox.Lag on the schema holding inbox_messages. Nil when there is
	// no inbox: the endpoint answers available false.
	Consumers func(ctx context.Context) ([]ConsumerLagJSON, error)
	// SampleInterval is how often the charts get a point. Defaults to
	// SampleIntervalDefault.
	SampleInterval time.Duration
	// History is how long the charts' points are kept in memory. Defaults
	// to HistoryDefault.
	History time.Duration
	// QueryTimeout bounds the database work of one request. Defaults to
	// QueryTimeoutDefault.
	QueryTimeout time.Duration
	// AllowedHosts are the host names (with an optional :port) that the
	// handler answers to, besides localhost, 127.0.0.1 and [::1] with any
	// port, when neither AuthToken nor BasicAuth is set. A request naming
	// another host in its Host header is refused with 403, so a web page
	// whose domain resolves to a loopback address (DNS rebinding) cannot
	// use the browser to read or change events. Add the names the
	// dashboard is opened by; AnyHost ("*") turns the check off, for a
	// handler behind authentication of your own. With AuthToken or
	// BasicAuth every host is answered.
	AllowedHosts []string
	// Principal names who made a request, for the audit log, when your own
	// middleware authenticates users before the handler. Defaults to the
	// basic-auth user name, "token" for the bearer token, or "anonymous".
	Principal func(r *http.Request) string
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.BasePath = cmp.Or(c.BasePath, BasePathDefault)
	c.SampleInterval = cmp.Or(c.SampleInterval, SampleIntervalDefault)
	c.History = cmp.Or(c.History, HistoryDefault)
	c.QueryTimeout = cmp.Or(c.QueryTimeout, QueryTimeoutDefault)
	return c
}

// Validate reports the first invalid field as an *outbox.ConfigError. The
// error never contains the token or the password.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &outbox.ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case c.Manager == nil && c.Tenants == nil:
		return bad("Manager", "is nil: make one with outbox.NewManager")
	case c.Tenants != nil && c.TenantManager == nil:
		return bad("TenantManager", "is nil with Tenants set: pass a func making a tenant schema's Manager")
	case !strings.HasPrefix(c.BasePath, "/") || strings.ContainsAny(c.BasePath, "{}?#* \t"):
		return bad("BasePath", "is %q: use an absolute path such as /admin/outbox", c.BasePath)
	case c.SampleInterval < 100*time.Millisecond:
		return bad("SampleInterval", "is %v: use at least 100ms", c.SampleInterval)
	case c.History < c.SampleInterval:
		return bad("History", "is %v: use at least SampleInterval (%v)", c.History, c.SampleInterval)
	case c.History/c.SampleInterval > 100_000:
		return bad("History", "holds more than 100000 samples: lengthen SampleInterval or shorten History")
	case c.QueryTimeout <= 0:
		return bad("QueryTimeout", "is %v: use a positive duration", c.QueryTimeout)
	case c.ReplaySink != nil && strings.TrimSpace(c.ReplaySinkName) == "":
		return bad("ReplaySinkName", "is empty: name the replay sink (without credentials) for the dashboard and the audit log")
	case c.ReplaySink == nil && c.ReplaySinkName != "":
		return bad("ReplaySink", "is nil but ReplaySinkName is set: pass the sink too, or leave both empty")
	}
	if c.BasicAuth != nil {
		switch {
		case c.BasicAuth.User == "" || strings.Contains(c.BasicAuth.User, ":"):
			return &outbox.ConfigError{Field: "BasicAuth.User", Err: errors.New("must be non-empty and without ':'")}
		case c.BasicAuth.Password == "":
			return &outbox.ConfigError{Field: "BasicAuth.Password", Err: errors.New("is empty: set a password, or leave BasicAuth nil")}
		}
	}
	if err := checkAllowedHosts(c.AllowedHosts); err != nil {
		return &outbox.ConfigError{Field: "AllowedHosts", Err: err}
	}
	if c.AuthToken != "" && (len(c.AuthToken) < 16 || strings.ContainsAny(c.AuthToken, " \t\r\n")) {
		return &outbox.ConfigError{Field: "AuthToken", Err: errors.New("must be at least 16 characters without spaces: generate one with `openssl rand -hex 32`")}
	}
	return nil
}

// basePath returns the base path without a trailing slash ("" for the root).
func (c Config) basePath() string { return strings.TrimRight(c.BasePath, "/") }
