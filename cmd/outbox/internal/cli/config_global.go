package cli

import (
	"slices"

	"github.com/spf13/cobra"
)

// globalFileFlags are the global flags every command takes from the
// --config file when neither the flag nor its environment variable sets
// them. The file's other keys are the relay's.
var globalFileFlags = []string{"database-url", "schema", "pgbouncer", "log-level", "log-format"}

// isGlobalFileKey reports whether every command reads key.
func isGlobalFileKey(key fileKey) bool { return slices.Contains(globalFileFlags, key.flag) }

// loadConfig reads the --config file, if one is given, and fills the
// global settings that no flag or environment variable set (setup has
// turned those variables into flags already). The relay reads and checks
// every key, as it applies them all; other commands check that the
// relay's keys are known and leave their values alone.
func (a *app) loadConfig(cmd *cobra.Command) error {
	if a.configPath == "" {
		return nil
	}
	var read func(fileKey) bool
	if !isRelayCommand(cmd) {
		read = isGlobalFileKey
	}
	file, err := readConfigFile(a.configPath, read)
	if err != nil {
		return err
	}
	a.file, a.fileOrigins = file, map[string]string{}
	given := cmd.Flags().Changed
	for flag, dst := range map[string]*string{"schema": &a.schema, "log-level": &a.logLevel, "log-format": &a.logFormat} {
		if v, ok := file.get(flag); ok && !given(flag) {
			*dst, a.fileOrigins[flag] = v.str, v.origin()
		}
	}
	if v, ok := file.get("pgbouncer"); ok && !given("pgbouncer") {
		a.pgbouncer, a.fileOrigins["pgbouncer"] = v.flag, v.origin()
	}
	return nil
}

// globalName says how the operator set the global flag: the config file
// key and line when it came from there, else the flag (which its
// environment variable stands for).
func (a *app) globalName(flag string) string {
	if o, ok := a.fileOrigins[flag]; ok {
		return o
	}
	return "--" + flag
}

// isRelayCommand reports whether cmd is outbox relay.
func isRelayCommand(cmd *cobra.Command) bool {
	return cmd.Name() == "relay" && cmd.HasParent() && !cmd.Parent().HasParent()
}

// fileDatabaseURL is the config file's database.url and where it stands
// in the file, if the file has one.
func (a *app) fileDatabaseURL() (url, origin string, ok bool) {
	v, ok := a.file.get("database-url")
	if !ok {
		return "", "", false
	}
	return v.str, v.origin(), true
}
