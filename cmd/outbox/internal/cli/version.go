package cli

import (
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
)

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and the schema version this build ships",
		Args:  cobra.NoArgs,
		RunE: run(func(*cobra.Command, []string) error {
			version, goVersion, revision := "(unknown)", "", ""
			if bi, ok := debug.ReadBuildInfo(); ok {
				version, goVersion = bi.Main.Version, bi.GoVersion
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						revision = s.Value
					}
				}
			}
			a.stdout.printf("outbox %s\n", version)
			if revision != "" {
				a.stdout.printf("revision %s\n", revision)
			}
			if goVersion != "" {
				a.stdout.printf("built with %s\n", goVersion)
			}
			// The migrations are embedded; no database is needed to list them.
			latest := outboxmigrate.Latest(outbox.Postgres(nil))
			a.stdout.printf("schema version %d (%03d_%s)\n", latest.Version, latest.Version, latest.Name)
			return nil
		}),
	}
}
