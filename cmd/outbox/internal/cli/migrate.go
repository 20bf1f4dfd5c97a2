package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cmd/outbox/internal/dburl"
	"github.com/outboxkit/outbox/outboxcdc"
	"github.com/outboxkit/outbox/outboxmigrate"
)

func (a *app) migrateCommand() *cobra.Command {
	var (
		printSQL  bool
		partition string
		tenants   tenantFlags
		inboxOnly bool
		logical   bool
		dropLog   bool
		group     string
		ordering  string
	)
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the outbox table in --schema",
		Long: `migrate applies the outbox migrations that --schema lacks under a lock, so
running it from several processes at once is safe: in one transaction on
PostgreSQL (creating the schema if needed) and SQLite; on MySQL/MariaDB, which
commits each DDL statement, one step per migration (creating the database the
schema names if needed). outbox_migrations records what was applied.

With --partition-archive daily|weekly (PostgreSQL only) it also makes
outbox_events_archive a table partitioned by processed_at, keeping its rows,
so that outbox purge drops whole partitions of archived events instead of
deleting rows. Relays with --retention archive create the partitions ahead;
running this again with the same period creates any that are missing. The
period cannot be changed afterwards.

With --ordering aggregate it also prepares the schema for relays with
--ordering aggregate. On MySQL/MariaDB that creates the trigger that numbers
each aggregate's events (outbox_events_key_seq): every writer then pays a
second row per event, and the writers of one aggregate wait for each other,
so it is left out unless asked for, and an ordered relay refuses to start
without it. PostgreSQL and SQLite need nothing more.

With --logical (PostgreSQL with wal_level = logical) it also creates what
relay --capture logical streams from: a publication on the outbox table and a
logical replication slot, both named outbox_<schema>_<group>
(--capture-group); a capture relay creates them on its first start otherwise.
--drop-logical removes them instead, and nothing else: a slot nobody streams
from keeps WAL on the server's disk (docs/cdc.md).

With --print it prints the migrations as one SQL script instead, without
connecting, in the SQL of the database --database-url names (PostgreSQL when
none is given): vendor it into goose, atlas or golang-migrate.

With --inbox it creates or upgrades the consumer side's inbox_messages table
instead (outbox receive and the Go package inbox store received messages
there), on a migration track of its own recorded in inbox_migrations: a
consumer's database gets the inbox alone, and a service that writes and
consumes runs both.`,
		Example: "  outbox migrate\n  outbox migrate --ordering aggregate\n  outbox migrate --partition-archive daily\n  outbox migrate --print > outbox.sql\n  outbox migrate --inbox\n  outbox migrate --logical\n  outbox migrate --drop-logical",
		Args:    cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			cfg := outboxmigrate.Config{Schema: a.schema, PartitionArchive: outboxmigrate.Period(partition), Ordering: outbox.Ordering(ordering)}
			if ordering != "" && cfg.Ordering != outbox.OrderingAggregate && cfg.Ordering != outbox.OrderingNone {
				return usagef("invalid --ordering %q: use aggregate or none", ordering)
			}
			if partition != "" && cfg.PartitionArchive != outboxmigrate.PeriodDaily && cfg.PartitionArchive != outboxmigrate.PeriodWeekly {
				return usagef("invalid --partition-archive %q: use daily or weekly", partition)
			}
			if inboxOnly && ordering != "" {
				return usagef("invalid --ordering with --inbox: ordering concerns the outbox; migrate the outbox and the inbox in two runs")
			}
			if inboxOnly && partition != "" {
				return usagef("invalid --partition-archive with --inbox: the inbox has no archive; migrate the outbox and the inbox in two runs")
			}
			if tenants.on() && printSQL {
				return usagef("--print writes one script for --schema; leave out --tenant-schemas and --tenant-query")
			}
			if tenants.on() && inboxOnly {
				return usagef("invalid --inbox with --tenant-schemas or --tenant-query: the inbox lives in the consumer's own schema; run outbox migrate --inbox --schema NAME for it")
			}
			if inboxOnly && printSQL {
				a.stdout.printf("%s", outboxmigrate.InboxSQL(offlineDatabase(a.databaseURLOrEnv()), cfg))
				return nil
			}
			if logical && dropLog {
				return usagef("--logical and --drop-logical exclude each other: give one")
			}
			if (logical || dropLog) && (printSQL || partition != "") {
				return usagef("--logical and --drop-logical cannot be combined with --print or --partition-archive; run them apart")
			}
			if (logical || dropLog) && inboxOnly {
				return usagef("--logical and --drop-logical are the outbox's: leave out --inbox")
			}
			if (logical || dropLog) && tenants.on() {
				return usagef("--logical and --drop-logical work on one --schema; leave out --tenant-schemas and --tenant-query")
			}
			if group == "" {
				return usagef("invalid --capture-group: is empty: name the relay group, or leave it out for %q", outboxcdc.GroupDefault)
			}
			if cmd.Flags().Changed("capture-group") && !logical && !dropLog {
				return usagef("--capture-group needs --logical or --drop-logical")
			}
			if dropLog {
				return a.dropLogical(cmd.Context(), group)
			}
			if printSQL {
				// The script is generated offline, in the dialect the URL
				// names (PostgreSQL without one): a Database without a pool.
				db := offlineDatabase(a.databaseURLOrEnv())
				part, err := outboxmigrate.PartitionSQL(db, cfg)
				if err != nil {
					return partitionError(err)
				}
				a.stdout.printf("%s", outboxmigrate.SQL(db, cfg))
				if part != "" {
					a.stdout.printf("\n-- archive partitioning, outbox migrate --partition-archive %s\n%s", partition, part)
				}
				return nil
			}
			if a.pgbouncer {
				return usagef("invalid %s: outbox migrate holds a session's advisory lock, which PgBouncer in transaction mode does not keep; run it against PostgreSQL directly, or through a session-mode pool, without --pgbouncer", a.globalName("pgbouncer"))
			}
			if tenants.on() {
				return a.migrateTenants(cmd.Context(), &tenants, func(db outbox.Database, schema string) ([]string, int, error) {
					c := cfg
					c.Schema = schema
					res, err := outboxmigrate.Migrate(cmd.Context(), db, c)
					if err != nil {
						if inner := errors.Unwrap(err); inner != nil && strings.HasPrefix(err.Error(), "outboxmigrate: ") {
							err = inner
						}
						return nil, 0, err
					}
					var applied []string
					for _, m := range res.Applied {
						applied = append(applied, fmt.Sprintf("%03d_%s", m.Version, m.Name))
					}
					return applied, res.Version, nil
				})
			}
			db, closer, kind, err := a.openDatabase(cmd.Context())
			if err != nil {
				return err
			}
			defer func() { _ = closer.Close() }()
			if kind == dburl.KindPostgres && (strings.HasPrefix(strings.ToLower(a.schema), "pg_") || a.schema == "information_schema") {
				return usagef("invalid %s %q: PostgreSQL keeps that name for its own catalogs; choose another schema, such as outbox", a.globalName("schema"), a.schema)
			}
			if inboxOnly {
				return a.migrateInbox(cmd.Context(), db, cfg)
			}
			res, err := outboxmigrate.Migrate(cmd.Context(), db, cfg)
			if err != nil {
				if errors.Is(err, outboxmigrate.ErrPartitionUnsupported) || errors.Is(err, outboxmigrate.ErrPeriodChange) {
					return partitionError(err)
				}
				// One prefix, this command's, instead of "outboxmigrate:"
				// after the CLI's own "outbox:".
				if inner := errors.Unwrap(err); inner != nil && strings.HasPrefix(err.Error(), "outboxmigrate: ") {
					return fmt.Errorf("migrate schema %q: %w", a.schema, inner)
				}
				return err
			}
			if len(res.Applied) == 0 {
				a.stdout.printf("schema is up to date at version %d\n", res.Version)
			} else {
				for _, m := range res.Applied {
					a.stdout.printf("applied migration %03d_%s to schema %q\n", m.Version, m.Name, a.schema)
				}
				a.stdout.printf("schema is now at version %d\n", res.Version)
			}
			if cfg.Ordering == outbox.OrderingAggregate {
				a.stdout.printf("schema is prepared for relays with --ordering aggregate\n")
			}
			if logical {
				return a.setupLogical(cmd.Context(), group)
			}
			if partition == "" {
				return nil
			}
			if res.Archive.Converted {
				a.stdout.printf("partitioned outbox_events_archive %s by processed_at, keeping its rows\n", partition)
			} else {
				a.stdout.printf("outbox_events_archive is already partitioned %s\n", partition)
			}
			for _, name := range res.Archive.Created {
				a.stdout.printf("created partition %s\n", name)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&printSQL, "print", false, "print the migrations as SQL instead of applying them (needs no database)")
	f.StringVar(&partition, "partition-archive", "", "partition outbox_events_archive by processed_at: daily or weekly (PostgreSQL only)")
	tenants.addFlags(f, "migrate every schema")
	f.BoolVar(&inboxOnly, "inbox", false, "migrate the consumer side's inbox_messages table (its own track, inbox_migrations) instead of the outbox")
	f.StringVar(&ordering, "ordering", "", "aggregate: also prepare the schema for ordered relays (on MySQL/MariaDB the key-sequence trigger, which every writer pays for)")
	f.BoolVar(&logical, "logical", false, "also create the publication and the logical replication slot of relay --capture logical (PostgreSQL with wal_level = logical)")
	f.BoolVar(&dropLog, "drop-logical", false, "drop the replication slot and the publication of relay --capture logical (stop those relays first), and nothing else")
	f.StringVar(&group, "capture-group", outboxcdc.GroupDefault, "with --logical or --drop-logical, the relay group whose slot and publication (outbox_<schema>_<group>) to create or drop")
	return cmd
}

// migrateInbox applies the inbox's migrations and reports them.
func (a *app) migrateInbox(ctx context.Context, db outbox.Database, cfg outboxmigrate.Config) error {
	res, err := outboxmigrate.MigrateInbox(ctx, db, cfg)
	if err != nil {
		if inner := errors.Unwrap(err); inner != nil && strings.HasPrefix(err.Error(), "outboxmigrate: ") {
			return fmt.Errorf("migrate the inbox in schema %q: %w", a.schema, inner)
		}
		return err
	}
	if len(res.Applied) == 0 {
		a.stdout.printf("inbox is up to date at version %d\n", res.Version)
		return nil
	}
	for _, m := range res.Applied {
		a.stdout.printf("applied inbox migration %03d_%s to schema %q\n", m.Version, m.Name, a.schema)
	}
	a.stdout.printf("inbox is now at version %d\n", res.Version)
	return nil
}

// partitionError makes the operator's partitioning mistakes usage errors.
func partitionError(err error) error {
	switch {
	case errors.Is(err, outboxmigrate.ErrPartitionUnsupported):
		return usagef("invalid --partition-archive: archive partitioning is PostgreSQL only; leave the flag out for this database")
	case errors.Is(err, outboxmigrate.ErrPeriodChange):
		// errors.Unwrap drops outboxmigrate's "outboxmigrate: " prefix.
		return usagef("invalid --partition-archive: %w; use the archive's period or leave the flag out", errors.Unwrap(err))
	}
	return err
}

// databaseURLOrEnv is --database-url, $OUTBOX_DATABASE_URL or the
// --config file's database.url, possibly empty.
func (a *app) databaseURLOrEnv() string {
	if a.databaseURLFlag != "" {
		return a.databaseURLFlag
	}
	if u := os.Getenv(EnvDatabaseURL); u != "" {
		return u
	}
	u, _, _ := a.fileDatabaseURL()
	return u
}

// offlineDatabase is a Database without a pool of the kind raw names, for
// what needs no connection (the migration script).
func offlineDatabase(raw string) outbox.Database {
	c, err := dburl.Parse(raw)
	if err != nil || raw == "" {
		return outbox.Postgres(nil)
	}
	switch c.Kind {
	case dburl.KindSQLite:
		return outbox.SQLite(nil)
	case dburl.KindMySQL, dburl.KindMariaDB:
		return outbox.MySQL(nil)
	}
	return outbox.Postgres(nil)
}

// capturePool opens a pool on the PostgreSQL database of --database-url,
// for the logical replication commands.
func (a *app) capturePool(ctx context.Context, flag string) (*pgxpool.Pool, *pgxpool.Config, error) {
	db, _, err := a.parseDatabase()
	if err != nil {
		return nil, nil, err
	}
	if db.Postgres == nil {
		return nil, nil, usagef("%s needs PostgreSQL: logical replication is PostgreSQL's, not %s's", flag, db.Kind)
	}
	if a.pgbouncer {
		return nil, nil, usagef("%s needs a direct connection to PostgreSQL: PgBouncer does not pass replication connections; leave out %s", flag, a.globalName("pgbouncer"))
	}
	pool, err := a.open(ctx, db.Postgres)
	if err != nil {
		return nil, nil, err
	}
	return pool, db.Postgres, nil
}

// setupLogical creates the capture relay's publication and slot.
func (a *app) setupLogical(ctx context.Context, group string) error {
	pool, pc, err := a.capturePool(ctx, "--logical")
	if err != nil {
		return err
	}
	defer pool.Close()
	slot, err := outboxcdc.Setup(ctx, pool, &pc.ConnConfig.Config, a.schema, group)
	if err != nil {
		if errors.Is(err, outboxcdc.ErrWALLevel) {
			return usagef("--logical: %v", err)
		}
		return err
	}
	if slot.Created {
		a.stdout.printf("created publication and logical replication slot %s (%s)\n", slot.Name, failoverNote(slot.Failover))
	} else {
		a.stdout.printf("publication and logical replication slot %s exist\n", slot.Name)
	}
	return nil
}

// failoverNote says what becomes of a new slot when a standby is promoted.
func failoverNote(failover bool) string {
	if failover {
		return "a failover slot: standbys with sync_replication_slots = on keep it through a promotion"
	}
	return "this server has no failover slots (PostgreSQL 17 and later): after a failover the relay creates a new slot on the new primary; see docs/cdc.md#failover"
}

// dropLogical drops the capture relay's slot and publication.
func (a *app) dropLogical(ctx context.Context, group string) error {
	pool, _, err := a.capturePool(ctx, "--drop-logical")
	if err != nil {
		return err
	}
	defer pool.Close()
	name := outboxcdc.SlotName(a.schema, group)
	droppedSlot, droppedPub, err := outboxcdc.Drop(ctx, pool, a.schema, group)
	if err != nil {
		return fmt.Errorf("drop logical replication slot %s: %w", name, err)
	}
	switch {
	case droppedSlot && droppedPub:
		a.stdout.printf("dropped logical replication slot and publication %s\n", name)
	case droppedSlot:
		a.stdout.printf("dropped logical replication slot %s (it had no publication)\n", name)
	case droppedPub:
		a.stdout.printf("dropped publication %s (it had no slot)\n", name)
	default:
		a.stdout.printf("no logical replication slot or publication %s to drop\n", name)
	}
	return nil
}
