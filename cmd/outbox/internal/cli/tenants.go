package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/pflag"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cmd/outbox/internal/dburl"
	"github.com/outboxkit/outbox/outboxadmin"
)

// tenantFlags are --tenant-schemas, --tenant-query and --tenant-refresh:
// schema-per-tenant outboxes (docs/tenants.md).
type tenantFlags struct {
	schemas  string
	query    string
	refresh  time.Duration
	metrics  string   // --tenant-metrics: per-tenant or aggregate
	fileURLs []string // the config file's database.urls
}

func (t *tenantFlags) addFlags(f *pflag.FlagSet, what string) {
	f.StringVar(&t.schemas, "tenant-schemas", "", what+" whose name matches this glob (* any run of characters, ? one), such as 's_*', instead of --schema")
	f.StringVar(&t.query, "tenant-query", "", what+" named by the first column of this SELECT, such as \"SELECT schema_name FROM public.tenants WHERE status = 'ACTIVE'\", instead of --schema")
}

func (t *tenantFlags) on() bool { return t.schemas != "" || t.query != "" }

// flagName is the command-line name of the tenant flag in use.
func (t *tenantFlags) flagName() string {
	if t.query != "" {
		return "--tenant-query"
	}
	return "--tenant-schemas"
}

// flag names the tenant flag in use, as the operator set it.
func (t *tenantFlags) flag(m *merger) string {
	if t.query != "" {
		return m.name("tenant-query")
	}
	return m.name("tenant-schemas")
}

// checkTenantFlags refuses what tenant discovery cannot do.
func (a *app) checkTenantFlags(m *merger, t *tenantFlags, kind dburl.Kind) error {
	name := t.flag(m)
	switch {
	case t.schemas != "" && t.query != "":
		return usagef("%s and %s are both set: discover tenants one way", m.name("tenant-schemas"), m.name("tenant-query"))
	case kind == dburl.KindSQLite:
		return tenantKindError(name)
	case a.schema != outbox.SchemaDefault:
		return usagef("%s is set with %s: each tenant's schema is its own; leave %s out", name, a.globalName("schema"), a.globalName("schema"))
	case t.refresh <= 0:
		return usagef("invalid %s %v: use a positive duration", m.name("tenant-refresh"), t.refresh)
	}
	if strings.ContainsRune(t.schemas+t.query, 0) {
		return usagef("invalid %s: holds a NUL byte", name)
	}
	return nil
}

// tenantKindError refuses the tenant flags on SQLite, where there is no
// tenant to discover.
func tenantKindError(flag string) error {
	return usagef("%s does not apply to SQLite: a SQLite file holds one outbox (one schema), so there are no tenant schemas to discover; run one relay per file, each with its --database-url", flag)
}

// checkTenantKind refuses the tenant flags on SQLite before connecting.
func (a *app) checkTenantKind(t *tenantFlags) error {
	c, _, err := a.parseDatabase()
	if err != nil {
		return err
	}
	if c.Kind == dburl.KindSQLite {
		return tenantKindError(t.flagName())
	}
	return nil
}

// isSystemSchema reports whether name is one the database keeps for its
// own catalogs, which no tenant may be: PostgreSQL's pg_* and
// information_schema, MySQL's mysql, sys and *_schema databases, and on
// MySQL public, which names the URL's own database.
func isSystemSchema(kind dburl.Kind, name string) bool {
	if kind == dburl.KindPostgres {
		return strings.HasPrefix(strings.ToLower(name), "pg_") || name == "information_schema"
	}
	switch strings.ToLower(name) {
	case "mysql", "sys", "information_schema", "performance_schema", "public":
		return true
	}
	return false
}

// tenantDatabase is one database the tenant relay serves: its pool's
// configuration (PostgreSQL) or its URL (MySQL/MariaDB), and, with
// several, its label (host:port/name).
type tenantDatabase struct {
	pc    *pgxpool.Config
	raw   string // the MySQL/MariaDB URL when pc is nil
	label string
	ready *tenantDatabaseReady // its /readyz check, with --metrics-addr
}

// displayLabel names the database in /readyz: its label, host:port/name.
func (d tenantDatabase) displayLabel() string {
	if d.label != "" {
		return d.label
	}
	if d.pc != nil {
		return describeDatabase(d.pc)
	}
	return describeSQLDatabase(d.raw)
}

// tenantDatabaseURLs returns the databases a tenant relay serves when
// there are several: every --database-url, else the config file's
// database.urls; nil for one database.
func (a *app) tenantDatabaseURLs(t *tenantFlags) []string {
	if !t.on() {
		return nil
	}
	if len(a.databaseURLFlags) > 0 {
		return a.databaseURLFlags
	}
	// The environment's one URL wins over the file, as it does over
	// database.url.
	if len(t.fileURLs) > 0 && os.Getenv(EnvDatabaseURL) == "" {
		return t.fileURLs
	}
	return nil
}

// tenantDatabases parses the URLs of several databases: PostgreSQL,
// MySQL/MariaDB or both, each named once.
func (a *app) tenantDatabases(urls []string, m *merger) ([]tenantDatabase, error) {
	name := "--database-url"
	if len(a.databaseURLFlags) == 0 {
		name = m.name("database-urls")
	}
	var out []tenantDatabase
	seen := map[string]bool{}
	for _, raw := range urls {
		a.redact.addDatabaseURL(raw)
		if raw == "" {
			return nil, usagef("invalid %s: an empty URL; give each database's postgres:// or mysql:// URL", name)
		}
		if isSQLURL(raw) {
			c, err := dburl.Parse(raw)
			if err != nil {
				return nil, usagef("invalid %s: %w", name, err)
			}
			if c.Kind == dburl.KindSQLite {
				return nil, usagef("invalid %s `%s`: several databases need PostgreSQL or MySQL/MariaDB URLs; a SQLite file holds one outbox, run one relay per file", name, c.Redacted)
			}
			a.redact.add(c.MySQL.Passwd)
			label := describeSQLDatabase(raw)
			if seen[label] {
				return nil, usagef("invalid %s: %s is named twice: give each database once", name, label)
			}
			seen[label] = true
			out = append(out, tenantDatabase{raw: raw, label: label})
			continue
		}
		pc, err := pgxpool.ParseConfig(raw)
		if err != nil {
			return nil, usagef("invalid %s: %s", name, parseErrorMessage(raw, err))
		}
		a.redact.add(pc.ConnConfig.Password)
		if a.pgbouncer {
			outbox.ConfigurePgBouncer(pc)
		}
		label := describeDatabase(pc)
		if seen[label] {
			return nil, usagef("invalid %s: %s is named twice: give each database once", name, label)
		}
		seen[label] = true
		out = append(out, tenantDatabase{pc: pc, label: label})
	}
	return out, nil
}

// runTenants serves every tenant schema of each database on a pool of its
// own until ctx ends. With several databases each runs apart: one that is
// down, slow or unreachable holds up only its own tenants, and is retried
// until it answers.
func (a *app) runTenants(ctx context.Context, dbs []tenantDatabase, cfg outbox.RelayConfig, sinkName string, t *tenantFlags, o *observability) error {
	if o.metricsAddr != "" {
		for i := range dbs {
			dbs[i].ready = &tenantDatabaseReady{}
		}
	}
	obs, err := a.startTenantObservers(ctx, o, &cfg, sinkName, t.metrics, dbs)
	if err != nil {
		return err
	}
	defer obs.stop()
	a.logger.Info("relay publishing tenants to sink", "sink", sinkName, "relay_id", cfg.RelayID,
		"tenant_schemas", t.schemas, "tenant_query", t.query, "databases", len(dbs), "retention", string(cfg.Retention), "listen", cfg.Listen)
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	stopNote := context.AfterFunc(ctx, func() {
		a.logger.Info("shutdown signal received; finishing in-flight batches, up to --shutdown-timeout",
			"shutdown_timeout", cfg.ShutdownTimeout)
		stopRun()
	})
	defer stopNote()
	if len(dbs) == 1 {
		ts, closePool, err := a.newTenants(ctx, dbs[0], cfg, t, obs)
		if err != nil {
			return err
		}
		defer closePool()
		return ts.Run(runCtx)
	}
	errs := make(chan error, len(dbs))
	for _, d := range dbs {
		go func() { errs <- a.serveTenantDatabase(runCtx, d, cfg, t, obs) }()
	}
	var first error
	for range dbs {
		if err := <-errs; err != nil && first == nil {
			first = err
			stopRun()
		}
	}
	return first
}

// newTenants makes the pool and the tenant supervisor of one database.
// With one database the pool is connected at once, so a wrong URL fails
// the command.
func (a *app) newTenants(ctx context.Context, d tenantDatabase, cfg outbox.RelayConfig, t *tenantFlags, obs *tenantObservers) (*outbox.Tenants, func(), error) {
	if d.pc == nil {
		return a.newSQLTenants(ctx, d, cfg, t, obs)
	}
	pc := d.pc
	outbox.ConfigureRelayPool(pc, cfg.RelayID)
	if cfg.PgBouncer {
		outbox.ConfigurePgBouncer(pc)
	}
	// The tenants' loops share the pool: a few connections per worker,
	// the discovery and the scan, and one held in LISTEN. pgxpool hands
	// connections out first come, first served, which keeps the tenants
	// fair; raise pool_max_conns in the URL for many busy tenants.
	pc.MaxConns = max(pc.MaxConns, int32(min(2*cfg.Workers+4, 1<<20)))
	var (
		pool *pgxpool.Pool
		err  error
	)
	if d.label == "" {
		pool, err = a.open(ctx, pc)
	} else {
		// Lazy: a database that is down must not keep the others from
		// starting.
		pool, err = pgxpool.NewWithConfig(ctx, pc)
	}
	if err != nil {
		return nil, nil, err
	}
	db := outbox.Postgres(pool)
	d.ready.set(db)
	// The metrics name the database even when it is the only one (whose
	// events' ids stay unqualified by it).
	observers, err := obs.tenantMetrics(db, cmp.Or(d.label, describeDatabase(pc)))
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	ts, err := outbox.NewTenants(db, outbox.TenantsConfig{
		Relay: cfg, Schemas: t.schemas, Query: t.query, Refresh: t.refresh, Database: d.label, Logger: a.logger,
		Observers: observers,
	})
	if err != nil {
		pool.Close()
		return nil, nil, relayConfigError(err)
	}
	return ts, pool.Close, nil
}

// newSQLTenants is newTenants for MySQL/MariaDB, where each tenant is a
// database of the server the URL names.
func (a *app) newSQLTenants(ctx context.Context, d tenantDatabase, cfg outbox.RelayConfig, t *tenantFlags, obs *tenantObservers) (*outbox.Tenants, func(), error) {
	// With several databases (a label) the pool is lazy: a server that is
	// down must not keep the others from starting.
	db, closer, kind, err := dburl.Open(ctx, d.raw, dburl.Options{RelayID: cfg.RelayID, MaxConns: 2*cfg.Workers + 4, ConnectTimeout: connectTimeout, Lazy: d.label != ""})
	if err != nil {
		return nil, nil, err
	}
	closeDB := func() { _ = closer.Close() }
	d.ready.set(db)
	if cfg.Listen {
		a.logger.Warn("--listen has no effect on "+string(kind)+": only PostgreSQL has LISTEN/NOTIFY; the due scan wakes the tenants", "database", d.displayLabel())
		cfg.Listen = false
	}
	observers, err := obs.tenantMetrics(db, cmp.Or(d.label, describeSQLDatabase(d.raw)))
	if err != nil {
		closeDB()
		return nil, nil, err
	}
	ts, err := outbox.NewTenants(db, outbox.TenantsConfig{
		Relay: cfg, Schemas: t.schemas, Query: t.query, Refresh: t.refresh, Database: d.label, Logger: a.logger,
		Observers: observers,
	})
	if err != nil {
		closeDB()
		return nil, nil, relayConfigError(err)
	}
	return ts, closeDB, nil
}

// describeSQLDatabase labels a MySQL/MariaDB URL host:port/name, never
// with its credentials.
func describeSQLDatabase(raw string) string {
	c, err := dburl.Parse(raw)
	if err != nil || c.MySQL == nil {
		return ""
	}
	return c.MySQL.Addr + "/" + c.MySQL.DBName
}

// serveTenantDatabase runs one database's tenants until ctx ends,
// starting them again (with backoff) while the database does not answer.
func (a *app) serveTenantDatabase(ctx context.Context, d tenantDatabase, cfg outbox.RelayConfig, t *tenantFlags, obs *tenantObservers) error {
	ts, closePool, err := a.newTenants(ctx, d, cfg, t, obs)
	if err != nil {
		return err
	}
	defer closePool()
	log := a.logger.With("database", d.label)
	for attempt := 0; ; attempt++ {
		err := ts.Start(ctx)
		if err == nil {
			if attempt > 0 {
				log.Info("database answers; serving its tenants")
			}
			break
		}
		wait := min(time.Duration(1<<min(attempt, 5))*time.Second, 30*time.Second)
		if attempt == 0 || attempt%10 == 0 {
			log.Warn("database unavailable; its tenants wait, the other databases' are served; retrying", "error", a.redact.String(err.Error()), "retry_in", wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	_ = ts.Stop(stopCtx)
	return nil
}

// migrateTenants migrates every tenant schema, each under its own lock,
// and reports per schema. It goes on after a schema fails and returns an
// error naming how many failed.
func (a *app) migrateTenants(ctx context.Context, t *tenantFlags, migrate func(db outbox.Database, schema string) (applied []string, version int, err error)) error {
	if err := a.checkTenantCommand(t); err != nil {
		return err
	}
	db, closer, kind, err := a.openDatabase(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = closer.Close() }()
	schemas, err := outbox.ListTenants(ctx, db, t.schemas, t.query)
	if err != nil {
		return err
	}
	if len(schemas) == 0 {
		return errors.New("no schema matches: create the tenant schemas first, or check the glob or query")
	}
	failed := 0
	for _, s := range schemas {
		if isSystemSchema(kind, s) {
			a.stdout.printf("%s: skipped: the name is reserved for the database's own catalogs (on MySQL, public means the URL's database)\n", quoteSchema(s))
			failed++
			continue
		}
		applied, version, err := migrate(db, s)
		switch {
		case err != nil:
			a.stdout.printf("%s: failed: %v\n", quoteSchema(s), err)
			failed++
		case len(applied) == 0:
			a.stdout.printf("%s: up to date at version %d\n", quoteSchema(s), version)
		default:
			a.stdout.printf("%s: applied %s; now at version %d\n", quoteSchema(s), strings.Join(applied, ", "), version)
		}
	}
	a.stdout.printf("%d tenant schemas, %d failed\n", len(schemas), failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d tenant schemas were not migrated (see above); run the command again once fixed, it is idempotent", failed, len(schemas))
	}
	return nil
}

// quoteSchema shows a schema name safely on a terminal: quoted, with
// control characters escaped.
func quoteSchema(s string) string { return fmt.Sprintf("%q", s) }

// urlsFlag is --database-url: repeatable, the last one is the database of
// the commands that take one.
type urlsFlag struct {
	last *string
	all  *[]string
}

func (u *urlsFlag) String() string {
	if u.last == nil {
		return ""
	}
	return *u.last
}

func (u *urlsFlag) Set(s string) error {
	*u.last = s
	*u.all = append(*u.all, s)
	return nil
}

// Type is "string", as for any one-valued flag, in the help.
func (u *urlsFlag) Type() string { return "string" }

// tenantStatsJSON is one tenant's counts in stats --tenant-schemas --json.
type tenantStatsJSON struct {
	Schema                  string  `json:"schema"`
	Pending                 int64   `json:"pending"`
	Processing              int64   `json:"processing"`
	Processed               int64   `json:"processed"`
	Failed                  int64   `json:"failed"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
}

// tenantsStatsJSON is the stats --tenant-schemas --json document: every
// tenant, sorted by lag (the oldest pending event first), and the totals
// (the oldest pending age is the largest).
type tenantsStatsJSON struct {
	Tenants                 []tenantStatsJSON `json:"tenants"`
	Pending                 int64             `json:"pending"`
	Processing              int64             `json:"processing"`
	Processed               int64             `json:"processed"`
	Failed                  int64             `json:"failed"`
	OldestPendingAgeSeconds float64           `json:"oldest_pending_age_seconds"`
}

// checkTenantCommand refuses, before connecting, tenant flags that a
// command other than the relay cannot use: both discoveries at once, with
// --schema, or on SQLite.
func (a *app) checkTenantCommand(t *tenantFlags) error {
	if t.schemas != "" && t.query != "" {
		return usagef("--tenant-schemas and --tenant-query are both set: discover tenants one way")
	}
	if a.schema != outbox.SchemaDefault {
		return usagef("--tenant-schemas or --tenant-query is set with %s: each tenant's schema is its own; leave %s out", a.globalName("schema"), a.globalName("schema"))
	}
	return a.checkTenantKind(t)
}

// eachTenant runs fn with a Manager for every tenant schema holding an
// outbox, in name order, printing a line for each tenant fn fails on and
// going on; it returns how many tenants there were and how many failed.
func (a *app) eachTenant(ctx context.Context, t *tenantFlags, fn func(schema string, m *outbox.Manager) error) (n, failed int, err error) {
	if err := a.checkTenantCommand(t); err != nil {
		return 0, 0, err
	}
	db, closer, _, err := a.openDatabase(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = closer.Close() }()
	schemas, err := outbox.DiscoverTenants(ctx, db, t.schemas, t.query)
	if err != nil {
		return 0, 0, err
	}
	if len(schemas) == 0 {
		return 0, 0, errors.New("no tenant schema with an outbox matches: check the glob or query")
	}
	for _, s := range schemas {
		if err := ctx.Err(); err != nil {
			return len(schemas), failed, err
		}
		if err := fn(s, outbox.NewManager(db, outbox.ManagerConfig{Schema: s})); err != nil {
			a.stdout.printf("%s: failed: %s\n", quoteSchema(s), a.redact.String(err.Error()))
			failed++
		}
	}
	return len(schemas), failed, nil
}

// tenantStatsWatchJSON is one line of stats --tenant-schemas --watch --json.
type tenantStatsWatchJSON struct {
	At time.Time `json:"at"`
	tenantsStatsJSON
}

// tenantStats counts every tenant's events (Manager.TenantStats: what
// Manager.Stats reads of each schema, in one statement per 50
// tenants), and writes them;
// with watch, again every interval (discovering tenants each time) until
// ctx ends: redrawn in place on a terminal, a block or a JSON line per
// refresh elsewhere.
func (a *app) tenantStats(ctx context.Context, t *tenantFlags, asJSON, watch bool, interval time.Duration) error {
	if err := a.checkTenantCommand(t); err != nil {
		return err
	}
	db, closer, _, err := a.openDatabase(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = closer.Close() }()
	if !watch {
		doc, err := countTenants(ctx, db, t)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(a.stdout, doc)
		}
		return writeTenantStats(a.stdout, doc)
	}
	tty := !asJSON && isTerminal(a.stdout.w)
	lines := 0
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		doc, err := countTenants(ctx, db, t)
		if ctx.Err() != nil {
			return nil // interrupted: the normal end of a watch
		}
		if err != nil {
			return err
		}
		at := time.Now()
		if asJSON {
			data, err := json.Marshal(tenantStatsWatchJSON{At: at.UTC().Truncate(time.Millisecond), tenantsStatsJSON: doc})
			if err != nil {
				return err
			}
			if _, err := a.stdout.w.Write(append(data, '\n')); err != nil {
				return err
			}
		} else {
			var b bytes.Buffer
			if tty {
				fmt.Fprintf(&b, "outbox stats, %d tenants, every %s, at %s (Ctrl-C to stop)\n\n", len(doc.Tenants), interval, at.Format(time.TimeOnly))
			} else {
				fmt.Fprintf(&b, "# %s\n", at.UTC().Format(time.RFC3339))
			}
			if err := writeTenantStats(&b, doc); err != nil {
				return err
			}
			if !tty {
				b.WriteString("\n")
			}
			block := b.String()
			if tty && lines > 0 {
				block = fmt.Sprintf("\033[%dA\r\033[J", lines) + block
			}
			lines = strings.Count(b.String(), "\n")
			if _, err := io.WriteString(a.stdout.w, block); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// countTenants discovers the tenants and counts their events.
func countTenants(ctx context.Context, db outbox.Database, t *tenantFlags) (tenantsStatsJSON, error) {
	schemas, err := outbox.DiscoverTenants(ctx, db, t.schemas, t.query)
	if err != nil {
		return tenantsStatsJSON{}, err
	}
	doc := tenantsStatsJSON{Tenants: make([]tenantStatsJSON, 0, len(schemas))}
	// One statement per 50 tenants on PostgreSQL, MySQL and MariaDB.
	counts, err := outbox.NewManager(db, outbox.ManagerConfig{}).TenantStats(ctx, schemas)
	if err != nil {
		return doc, err
	}
	for _, st := range counts {
		c := outboxadmin.NewCountsJSON(st.Stats)
		doc.Tenants = append(doc.Tenants, tenantStatsJSON{Schema: st.Schema, Pending: c.Pending, Processing: c.Processing,
			Processed: c.Processed, Failed: c.Failed, OldestPendingAgeSeconds: c.OldestPendingAgeSeconds})
		doc.Pending += c.Pending
		doc.Processing += c.Processing
		doc.Processed += c.Processed
		doc.Failed += c.Failed
		doc.OldestPendingAgeSeconds = max(doc.OldestPendingAgeSeconds, c.OldestPendingAgeSeconds)
	}
	sort.SliceStable(doc.Tenants, func(i, j int) bool {
		return doc.Tenants[i].OldestPendingAgeSeconds > doc.Tenants[j].OldestPendingAgeSeconds
	})
	return doc, nil
}

// writeTenantStats writes doc as a table sorted by lag, with a total row.
func writeTenantStats(w io.Writer, doc tenantsStatsJSON) error {
	tw := newTable(w, 2)
	tw.row("tenant\tpending\tprocessing\tprocessed\tfailed\toldest pending age\n")
	for _, r := range doc.Tenants {
		tw.row("%s\t%d\t%d\t%d\t%d\t%s\n", safeText(r.Schema), r.Pending, r.Processing, r.Processed, r.Failed,
			time.Duration(r.OldestPendingAgeSeconds*float64(time.Second)).Round(time.Millisecond))
	}
	tw.row("total (%d tenants)\t%d\t%d\t%d\t%d\t%s\n", len(doc.Tenants), doc.Pending, doc.Processing, doc.Processed, doc.Failed,
		time.Duration(doc.OldestPendingAgeSeconds*float64(time.Second)).Round(time.Millisecond))
	return tw.flush()
}
