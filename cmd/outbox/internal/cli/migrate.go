package cli

import (
	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
)

func (a *app) migrateCommand() *cobra.Command {
	var printSQL bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the outbox table in --schema",
		Long: `migrate applies the outbox migrations that --schema lacks, in one transaction
under a lock, so running it from several processes at once is safe.

With --print it prints the migrations as one SQL script instead, without
connecting: vendor it into goose, atlas or golang-migrate.`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			cfg := outboxmigrate.Config{Schema: a.schema}
			if printSQL {
				// The script is generated offline: a Database without a pool.
				a.stdout.printf("%s", outboxmigrate.SQL(outbox.Postgres(nil), cfg))
				return nil
			}
			pool, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := outboxmigrate.Migrate(cmd.Context(), outbox.Postgres(pool), cfg)
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
