package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/outboxkit/outbox/outboxmigrate"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxadmin"
	"github.com/outboxkit/outbox/sink/webhooksink"
)

// Environment variables the admin command reads as flag defaults.
const (
	EnvAdminToken    = "OUTBOX_ADMIN_TOKEN"
	EnvAdminUser     = "OUTBOX_ADMIN_USER"
	EnvAdminPassword = "OUTBOX_ADMIN_PASSWORD"
)

// adminAddrDefault keeps the dashboard on the local machine unless told.
const adminAddrDefault = "127.0.0.1:8080"

// Timeouts of the admin server: a client that sends its request slowly or
// keeps an idle connection open does not hold a connection for ever.
const (
	adminReadHeaderTimeout = 10 * time.Second
	adminReadTimeout       = 30 * time.Second
	adminIdleTimeout       = 2 * time.Minute
)

// adminShutdownTimeout bounds how long requests in flight may finish after
// SIGTERM.
const adminShutdownTimeout = 10 * time.Second

// adminFlagNames maps outboxadmin.Config fields to their flags.
var adminFlagNames = map[string]string{
	"AuthToken": "--admin-token", "BasicAuth.User": "--admin-user", "BasicAuth.Password": "--admin-password",
	"BasePath": "--base-path", "SampleInterval": "--sample-interval", "AllowedHosts": "--allowed-hosts",
}

func (a *app) adminCommand() *cobra.Command {
	var (
		addr string
		cfg  outboxadmin.Config
		user string
		pass string
		// replaySink is the one sink the dashboard may replay delivered
		// events to; the browser never names one.
		replaySink string
		tenants    tenantFlags
	)
	cmd := &cobra.Command{
		Use:   "admin [--addr 127.0.0.1:8080]",
		Short: "Serve the admin dashboard and JSON API",
		Long: `admin serves the web dashboard (counts, lag and throughput charts, the failed
queue, an event browser, relays holding leases) and its JSON API, which
retries, replays and discards events.

It listens on 127.0.0.1 unless --addr names another address; then it refuses
to start without authentication: a bearer token (--admin-token or
$` + EnvAdminToken + `) or a basic-auth user and password (--admin-user and
--admin-password, or $` + EnvAdminUser + ` and $` + EnvAdminPassword + `).
Without authentication it answers only requests for localhost, 127.0.0.1,
[::1], the --addr host and --allowed-hosts, so a web page whose domain
resolves to 127.0.0.1 (DNS rebinding) cannot reach it through the browser.
Serve it over TLS (a reverse proxy) when it leaves the machine. Every action
is logged with who made it. It stops gracefully on SIGINT or SIGTERM.

With --replay-sink URL the event browser offers "Replay to sink…": the
delivered events a search selects are published to that sink (as
outbox events replay --sink does), after a confirmation showing their
count. The sink is fixed when the server starts; the API never takes a sink
or URL from a request. Its webhook secret comes from $` + EnvWebhookSecret + `.

With --tenant-schemas GLOB or --tenant-query SQL (PostgreSQL) it serves every
tenant schema holding an outbox instead of --schema: the overview lists each
tenant's counts, the most lagging first, and a tenant selector picks the
schema the other views work on. Tenants are discovered again as the
dashboard refreshes.`,
		Example: "  outbox admin\n  OUTBOX_ADMIN_TOKEN=$(openssl rand -hex 32) outbox admin --addr :8080\n" +
			"  outbox admin --tenant-schemas 's_*'",
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			cfg.AuthToken = envDefault(cfg.AuthToken, EnvAdminToken)
			user, pass = envDefault(user, EnvAdminUser), envDefault(pass, EnvAdminPassword)
			a.redact.add(cfg.AuthToken, pass)
			switch {
			case user != "" && pass == "":
				return usagef("missing --admin-password: basic auth needs the user's password (or set %s)", EnvAdminPassword)
			case user == "" && pass != "":
				return usagef("missing --admin-user: basic auth needs a user name (or set %s)", EnvAdminUser)
			case user != "":
				cfg.BasicAuth = &outboxadmin.BasicAuth{User: user, Password: pass}
			}
			if err := checkAdminAddr(addr, cfg.AuthToken != "" || cfg.BasicAuth != nil); err != nil {
				return err
			}
			// The address the dashboard listens on names it too.
			if host, _, _ := net.SplitHostPort(addr); host != "" {
				cfg.AllowedHosts = append(cfg.AllowedHosts, host)
			}
			// Check the flags before connecting; the Manager comes later.
			check := cfg
			check.Manager = &outbox.Manager{}
			if err := check.WithDefaults().Validate(); err != nil {
				return adminConfigError(err)
			}
			if tenants.on() {
				if err := a.checkTenantCommand(&tenants); err != nil {
					return err
				}
			}
			db, closer, _, err := a.openDatabase(cmd.Context())
			if err != nil {
				return err
			}
			defer func() { _ = closer.Close() }()
			if tenants.on() {
				cfg.Tenants = func(ctx context.Context) ([]string, error) {
					return outbox.DiscoverTenants(ctx, db, tenants.schemas, tenants.query)
				}
				cfg.TenantManager = func(schema string) *outbox.Manager {
					return outbox.NewManager(db, outbox.ManagerConfig{Schema: schema})
				}
				// A wrong query or an unreachable database fails the command.
				if _, err := cfg.Tenants(cmd.Context()); err != nil {
					return err
				}
				cfg.Logger = a.logger
				return a.serveAdminWith(cmd.Context(), addr, cfg, replaySink)
			}
			cfg.Manager = outbox.NewManager(db, outbox.ManagerConfig{Schema: a.schema})
			if err := cfg.Manager.Ping(cmd.Context()); err != nil {
				return a.tableError(err)
			}
			cfg.Logger = a.logger
			// The consumer side's backlog, when the schema holds an inbox.
			if v, err := outboxmigrate.InboxVersion(cmd.Context(), db, outboxmigrate.Config{Schema: a.schema}); err != nil {
				return err
			} else if v > 0 {
				cfg.Consumers = func(ctx context.Context) ([]outboxadmin.ConsumerLagJSON, error) {
					lags, err := a.consumerLags(ctx, db)
					if err != nil || lags == nil {
						return nil, err
					}
					return *lags, nil
				}
			}
			return a.serveAdminWith(cmd.Context(), addr, cfg, replaySink)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", adminAddrDefault, "address to listen on; other than loopback, authentication is required")
	f.StringVar(&cfg.AuthToken, "admin-token", "", "bearer token the API and dashboard require (default $"+EnvAdminToken+")")
	f.StringVar(&user, "admin-user", "", "basic-auth user name (default $"+EnvAdminUser+")")
	f.StringVar(&pass, "admin-password", "", "basic-auth password (default $"+EnvAdminPassword+")")
	f.BoolVar(&cfg.ReadOnly, "read-only", false, "refuse every action: view only")
	f.StringSliceVar(&cfg.AllowedHosts, "allowed-hosts", nil, "without authentication, host names (host or host:port) the dashboard answers to besides localhost, 127.0.0.1, [::1] and --addr; others get 403 (DNS rebinding)")
	f.StringVar(&cfg.BasePath, "base-path", outboxadmin.BasePathDefault, "path prefix to serve under, such as /outbox behind a proxy")
	f.DurationVar(&cfg.SampleInterval, "sample-interval", outboxadmin.SampleIntervalDefault, "how often the charts get a point")
	tenants.addFlags(f, "serve every schema")
	f.StringVar(&replaySink, "replay-sink", "", "a sink URL (as outbox relay --sink takes it) the dashboard may replay delivered events to, for a new consumer; fixed at start, never taken from a request")
	return cmd
}

// serveAdminWith opens the replay sink, when given, and serves the
// dashboard of cfg on addr until ctx ends.
func (a *app) serveAdminWith(ctx context.Context, addr string, cfg outboxadmin.Config, replaySink string) error {
	if replaySink != "" {
		sink, name, closeSink, err := a.openReplaySink(ctx, replaySink)
		if err != nil {
			return err
		}
		defer closeSink()
		cfg.ReplaySink, cfg.ReplaySinkName = sink, name
	}
	h, err := outboxadmin.New(cfg)
	if err != nil {
		return adminConfigError(err)
	}
	return a.serveAdmin(ctx, addr, h, cfg.BasePath)
}

// openReplaySink opens the dashboard's replay sink with the relay's sink
// defaults and $OUTBOX_WEBHOOK_SECRET, and names it without credentials.
func (a *app) openReplaySink(ctx context.Context, raw string) (outbox.Sink, string, func(), error) {
	if _, err := parseSinkScheme(raw); err != nil {
		return nil, "", nil, renameSinkFlag(err)
	}
	so := sinkOptions{Timeout: outbox.SinkTimeoutDefault, Stdout: a.stderr, Logger: a.logger, Concurrency: webhooksink.ConcurrencyDefault,
		WebhookSecret: os.Getenv(EnvWebhookSecret)}
	a.redact.add(so.WebhookSecret)
	desc := describeSink(raw, a.redact)
	sink, err := openSink(ctx, raw, so, a.redact)
	if err != nil {
		return nil, "", nil, renameSinkFlag(describeSinkError(desc, err))
	}
	return sink, desc, func() {
		if err := closeSink(sink); err != nil {
			a.logger.Warn("closing the replay sink failed", "error", err)
		}
	}, nil
}

// renameSinkFlag says --replay-sink in an error about the --sink value.
func renameSinkFlag(err error) error {
	var ue *usageError
	if errors.As(err, &ue) {
		return &usageError{err: errors.New(strings.ReplaceAll(err.Error(), "--sink", "--replay-sink"))}
	}
	return err
}

func envDefault(v, env string) string {
	if v != "" {
		return v
	}
	return os.Getenv(env)
}

// checkAdminAddr parses --addr and refuses an address other than loopback
// when no authentication is configured.
func checkAdminAddr(addr string, authenticated bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return usagef("invalid --addr %q: use host:port, such as 127.0.0.1:8080", addr)
	}
	if authenticated || isLoopback(host) {
		return nil
	}
	where := host
	if where == "" {
		where = "every interface"
	}
	return usagef("refusing to serve the admin API on %s without authentication: pass --admin-token (or $%s) or --admin-user and --admin-password, or listen on 127.0.0.1",
		where, EnvAdminToken)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// adminConfigError names the flag behind an invalid outboxadmin.Config
// field.
func adminConfigError(err error) error {
	var ce *outbox.ConfigError
	if errors.As(err, &ce) {
		if name, ok := adminFlagNames[ce.Field]; ok {
			return usagef("invalid %s: %v", name, ce.Err)
		}
		return &usageError{err: err}
	}
	return err
}

// newAdminServer returns the admin's HTTP server. There is no write
// timeout: a bulk retry or replay may run for minutes, bounded per batch by
// the database and cancelled when the client goes away.
func newAdminServer(ctx context.Context, h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: adminReadHeaderTimeout,
		ReadTimeout:       adminReadTimeout,
		IdleTimeout:       adminIdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
}

// serveAdmin serves h on addr until ctx ends, then lets requests in flight
// finish.
func (a *app) serveAdmin(ctx context.Context, addr string, h *outboxadmin.Handler, basePath string) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := newAdminServer(ctx, h, a.logger)
	if err := h.Start(ctx); err != nil {
		_ = ln.Close()
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	path := basePath
	if path == "" || path[len(path)-1] != '/' {
		path += "/"
	}
	a.logger.Info("admin dashboard listening", "url", "http://"+ln.Addr().String()+path)

	var serveErr error
	select {
	case serveErr = <-served:
	case <-ctx.Done():
		a.logger.Info("admin stopping")
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adminShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			a.logger.Warn("admin requests still running at shutdown were cut", "error", err)
		}
		serveErr = <-served
	}
	if err := h.Stop(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		a.logger.Info("admin stopped")
		return nil
	}
	return serveErr
}
