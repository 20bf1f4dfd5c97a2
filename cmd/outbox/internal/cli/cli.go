// Package cli is the outbox command line. The root command and its global
// flags are here; each command lives in a file of its own and is built on the
// outbox package's Manager, Relay and outboxmigrate, so the CLI holds no SQL
// and no defaults of its own.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outboxkit/outbox"
)

// Exit codes.
const (
	ExitOK      = 0 // success
	ExitFailure = 1 // the command ran and failed: database unreachable, table missing, event not found
	ExitUsage   = 2 // bad usage: unknown command or flag, bad flag value or URL, invalid configuration
)

// Environment variables read as flag defaults.
const (
	EnvDatabaseURL   = "OUTBOX_DATABASE_URL"
	EnvWebhookSecret = "OUTBOX_WEBHOOK_SECRET"
	EnvSchema        = "OUTBOX_SCHEMA"
	EnvLogLevel      = "OUTBOX_LOG_LEVEL"
	EnvLogFormat     = "OUTBOX_LOG_FORMAT"
)

// globalFlagEnv maps the global flags that an environment variable may
// set to that variable; a flag on the command line wins over it, and it
// wins over the relay's config file.
var globalFlagEnv = []struct {
	flag, env string
	allowed   []string // the values it takes; nil for any
}{
	{"schema", EnvSchema, nil},
	{"log-level", EnvLogLevel, logLevels},
	{"log-format", EnvLogFormat, logFormats},
}

// The values --log-level and --log-format take.
var (
	logLevels  = []string{"debug", "info", "warn", "error"}
	logFormats = []string{"text", "json"}
)

// Main runs the outbox command with args (without the program name) on the
// process's standard streams and returns the exit code.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal, restore the default handling so that a second
	// one kills a process whose graceful stop takes too long.
	context.AfterFunc(ctx, stop)
	return Run(ctx, args, os.Stdout, os.Stderr)
}

// Run runs the outbox command with args, writing results to stdout and
// errors, logs and progress to stderr, and returns the exit code. Cancelling
// ctx stops the command: the relay stops gracefully, other commands fail.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: &output{w: stdout}, stderr: stderr, redact: &redactor{}}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil && a.stdout.err != nil {
		err = &runError{err: a.stdout.err}
	}
	if err == nil {
		return ExitOK
	}
	notef(stderr, "outbox: %s\n", a.redact.String(oneLine(errorMessage(err, errors.Is(ctx.Err(), context.Canceled)))))
	return exitCode(err)
}

// app holds the global flags and what is derived from them; every command
// is a method set on it.
type app struct {
	stdout *output
	stderr io.Writer
	redact *redactor

	databaseURLFlag string
	// databaseURLFlags is every --database-url given, in order: outbox
	// relay with a tenant flag serves several databases; every other
	// command refuses more than one.
	databaseURLFlags []string
	databaseURLName  string // how the operator gave the database URL, for errors: --database-url or the config file key
	schema           string
	pgbouncer        bool // --pgbouncer: PostgreSQL through PgBouncer in transaction mode
	logFormat        string
	logLevel         string
	showVersion      bool // --version: print what outbox version prints
	configPath       string
	file             *fileConfig       // the --config file; nil without one
	fileOrigins      map[string]string // global flags set from the file: their key and line

	logger *slog.Logger
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "outbox",
		Short: "Operate a transactional outbox in PostgreSQL, SQLite or MySQL/MariaDB",
		Long: `outbox operates a transactional outbox in PostgreSQL, SQLite or MySQL/MariaDB:
applications write events into the outbox_events table in their own
transactions, and the relay publishes them to a sink (stdout, an HTTP
webhook, a broker).

Every command takes the database from --database-url or $` + EnvDatabaseURL + `,
or else from the --config file's database.url. The password in it never
appears in output or logs.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          groupArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.showVersion {
				a.printVersion()
				return nil
			}
			return groupRun(cmd, args)
		},
		PersistentPreRunE: a.setup,
	}
	root.SetHelpCommand(helpCommand())
	// A group command runs only to report a missing subcommand: do not
	// show "outbox [flags]" as a usage line.
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(),
		"Usage:{{if .Runnable}}", "Usage:{{if and .Runnable (not .HasAvailableSubCommands)}}", 1))
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err: err} })

	f := root.PersistentFlags()
	f.Var(&urlsFlag{last: &a.databaseURLFlag, all: &a.databaseURLFlags}, "database-url", "database URL: postgres://user:password@host:5432/db, sqlite:///path/app.db or mysql://user:password@host:3306/db (default $"+EnvDatabaseURL+"); repeatable for outbox relay with --tenant-schemas or --tenant-query")
	f.StringVar(&a.schema, "schema", outbox.SchemaDefault, "schema that holds outbox_events (or $"+EnvSchema+")")
	f.BoolVar(&a.pgbouncer, "pgbouncer", false, "PostgreSQL is reached through PgBouncer in transaction mode: no prepared statements, no startup parameters but application_name, no LISTEN (the relay polls)")
	f.StringVar(&a.logFormat, "log-format", "text", "log format on stderr: text or json (or $"+EnvLogFormat+")")
	f.StringVar(&a.logLevel, "log-level", "info", "log level: debug, info, warn or error (or $"+EnvLogLevel+")")
	f.StringVar(&a.configPath, "config", "", "YAML file of settings (see docs/brokers.md): every command reads the database and log settings from it, the relay all of its own; flags and environment variables win over it")
	root.Flags().BoolVar(&a.showVersion, "version", false, "print the version, as outbox version does")

	root.AddCommand(
		a.migrateCommand(),
		a.relayCommand(),
		a.statsCommand(),
		a.eventsCommand(),
		a.purgeCommand(),
		a.versionCommand(),
		a.demoCommand(),
		a.benchCommand(),
		a.adminCommand(),
		a.checkCommand(),
		a.receiveCommand(),
		a.inboxCommand(),
	)
	registerCompletions(root)
	return root
}

// flagValues are the values that flags of these names take, offered by
// shell completion (outbox completion bash|zsh|fish|powershell).
var flagValues = map[string][]string{
	"status":            {"pending", "processing", "processed", "failed"},
	"retention":         {"processed", "delete", "archive"},
	"ordering":          {"none", "aggregate"},
	"ordered-failure":   {"block", "skip"},
	"leases":            {"auto", "rows", "partitions"},
	"partition-archive": {"daily", "weekly"},
	"log-level":         logLevels,
	"log-format":        logFormats,
}

// registerCompletions offers flagValues for every command's flags of those
// names, the global ones included.
func registerCompletions(cmd *cobra.Command) {
	register := func(fs *pflag.FlagSet) {
		fs.VisitAll(func(f *pflag.Flag) {
			values, ok := flagValues[f.Name]
			if !ok {
				return
			}
			// Registering twice (a persistent flag seen again) is an error
			// that changes nothing.
			_ = cmd.RegisterFlagCompletionFunc(f.Name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
		})
	}
	register(cmd.LocalNonPersistentFlags())
	register(cmd.PersistentFlags())
	for _, c := range cmd.Commands() {
		registerCompletions(c)
	}
}

// setup checks the global flags and builds the logger; it runs before every
// command.
func (a *app) setup(cmd *cobra.Command, _ []string) error {
	for _, fe := range globalFlagEnv {
		v, ok := os.LookupEnv(fe.env)
		if !ok || cmd.Flags().Changed(fe.flag) {
			continue
		}
		if v == "" {
			return usagef("$%s is set but empty: give it a value or unset it", fe.env)
		}
		if fe.allowed != nil && !slices.Contains(fe.allowed, v) {
			return usagef("invalid $%s %q: use one of %s", fe.env, clip(v), strings.Join(fe.allowed, ", "))
		}
		// Set marks the flag given, so the relay's config file does not
		// override the variable.
		if err := cmd.Flags().Set(fe.flag, v); err != nil {
			return usagef("invalid $%s: %v", fe.env, err)
		}
	}
	if err := a.loadConfig(cmd); err != nil {
		return err
	}
	logger, err := newLogger(a.stderr, a.logFormat, a.logLevel, a.redact)
	if err != nil {
		return err
	}
	a.logger = logger
	slog.SetDefault(logger)
	return nil
}

// helpCommand is "outbox help [command]"; unlike cobra's, it fails on an
// unknown topic instead of printing the root's usage.
func helpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			switch {
			case err != nil:
				return &usageError{err: err}
			case len(rest) > 0 && cmd.HasAvailableSubCommands():
				return groupArgs(cmd, rest)
			case len(rest) > 0:
				return usagef("unknown help topic %q: see outbox --help", strings.Join(args, " "))
			}
			cmd.InitDefaultHelpFlag() // list -h, --help as --help does
			return cmd.Help()
		},
	}
}

// groupArgs rejects an unknown subcommand of a command that only groups
// others (the root, events).
func groupArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	msg := fmt.Sprintf("unknown command %q for %q: use one of %s", args[0], cmd.CommandPath(), subcommandList(cmd))
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return &usageError{err: errors.New(msg)}
}

// groupRun answers a group command called without a subcommand.
func groupRun(cmd *cobra.Command, _ []string) error {
	return usagef("missing command: use one of %s (see %s --help)", subcommandList(cmd), cmd.CommandPath())
}

func subcommandList(cmd *cobra.Command) string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() && c.Name() != "help" {
			names = append(names, c.Name())
		}
	}
	return strings.Join(names, ", ")
}

// run wraps a command's work: an error it returns is a runtime failure
// (exit 1) unless it is marked as bad usage. Errors cobra returns before a
// command runs (flags, arguments) are usage errors.
func run(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := fn(cmd, args); err != nil {
			return &runError{err: err}
		}
		return nil
	}
}
