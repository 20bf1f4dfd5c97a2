package cli

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/dburl"
	"github.com/outboxkit/outbox/outboxmigrate"
)

func (a *app) migrateCommand() *cobra.Command {
	var printSQL bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the outbox table in --schema",
		Long: `migrate applies the outbox migrations that --schema lacks under a lock, so
running it from several processes at once is safe: in one transaction on
PostgreSQL (creating the schema if needed) and SQLite; on MySQL/MariaDB, which
commits each DDL statement, one step per migration (creating the database the
schema names if needed). outbox_migrations records what was applied.

With --print it prints the migrations as one SQL script instead, without
connecting, in the SQL of the database --database-url names (PostgreSQL when
none is given): vendor it into goose, atlas or golang-migrate.`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			cfg := outboxmigrate.Config{Schema: a.schema}
			if printSQL {
				// The script is generated offline, in the dialect the URL
				// names (PostgreSQL without one): a Database without a pool.
				a.stdout.printf("%s", outboxmigrate.SQL(offlineDatabase(a.databaseURLOrEnv()), cfg))
				return nil
			}
			db, closer, _, err := a.openDatabase(cmd.Context(), "")
			if err != nil {
				return err
			}
			defer func() { _ = closer.Close() }()
			res, err := outboxmigrate.Migrate(cmd.Context(), db, cfg)
			if err != nil {
				return err
			}
			if len(res.Applied) == 0 {
				a.stdout.printf("schema is up to date at version %d\n", res.Version)
				return nil
			}
			for _, m := range res.Applied {
				a.stdout.printf("applied migration %03d_%s to schema %q\n", m.Version, m.Name, a.schema)
			}
			a.stdout.printf("schema is now at version %d\n", res.Version)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&printSQL, "print", false, "print the migrations as SQL instead of applying them (needs no database)")
	return cmd
}

// databaseURLOrEnv is --database-url or $OUTBOX_DATABASE_URL, possibly
// empty.
func (a *app) databaseURLOrEnv() string {
	if a.databaseURLFlag != "" {
		return a.databaseURLFlag
	}
	return os.Getenv(EnvDatabaseURL)
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
