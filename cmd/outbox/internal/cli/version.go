package cli

import (
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// version is the release version stamped at link time by scripts/release
// (-ldflags "-X github.com/outboxkit/outbox/cmd/outbox/internal/cli.version=v1.2.3");
// empty, the module version Go recorded in the build info is printed
// instead: v1.2.3 for go install …@v1.2.3, a pseudo-version or (devel) for
// a build from a checkout.
var version string

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and the schema version this build ships (also outbox --version)",
		Args:  cobra.NoArgs,
		RunE:  run(func(*cobra.Command, []string) error { a.printVersion(); return nil }),
	}
}

// printVersion is the output of outbox version and outbox --version.
func (a *app) printVersion() {
	v, goVersion, revision := "(unknown)", "", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		v, goVersion = bi.Main.Version, bi.GoVersion
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	if version != "" {
		v = version
	}
	a.stdout.printf("outbox %s\n", v)
	if revision != "" {
		a.stdout.printf("revision %s\n", revision)
	}
	if goVersion != "" {
		a.stdout.printf("built with %s\n", goVersion)
	}
	// The migrations are embedded; no database is needed to list them.
	latest := outboxmigrate.Latest(outbox.Postgres(nil))
	a.stdout.printf("schema version %d (%03d_%s)\n", latest.Version, latest.Version, latest.Name)
}
