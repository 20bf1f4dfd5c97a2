package deploy_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

const unitFile = "systemd/outbox-relay.service"

// observersStopBound is how long the relay command may take after the
// relay stopped, to shut its metrics server, alerter and tracer down
// (observers.stop in cmd/outbox/internal/cli).
const observersStopBound = 5 * time.Second

// unit is a systemd unit file: section → key → values, in order.
type unit map[string]map[string][]string

func (u unit) get(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

func parseUnit(t *testing.T, file string) unit {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	u, section := unit{}, ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			key, value, ok := strings.Cut(line, "=")
			require.True(t, ok && section != "", "%s:%d: not a key=value line in a section: %q", file, n, line)
			require.False(t, strings.HasSuffix(line, `\`), "%s:%d: keep each setting on one line", file, n)
			u[section][key] = append(u[section][key], value)
		}
	}
	require.NoError(t, sc.Err())
	return u
}

// flagValue is --name's value in args ("--name value" or "--name=value").
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// TestSystemdUnit checks deploy/systemd/outbox-relay.service: systemd-analyze
// verify accepts it (with ExecStart pointing at a release build) and rates
// its hardening at an exposure of 2.0 or less; its ExecStart runs the relay
// with flags the binary accepts; secrets come from an EnvironmentFile; and
// TimeoutStopSec leaves the relay time for its bounded graceful stop.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	require.NoError(t, err, "systemd-analyze is missing: install Debian's systemd package (apt-get install systemd); scripts/test does")
	u := parseUnit(t, unitFile)

	exec0 := strings.Fields(u.get("Service", "ExecStart"))
	require.GreaterOrEqual(t, len(exec0), 2)
	require.Equal(t, "/usr/local/bin/outbox", exec0[0])
	require.Equal(t, "relay", exec0[1])
	require.Equal(t, "/etc/outbox/relay.env", u.get("Service", "EnvironmentFile"), "secrets come from an EnvironmentFile")
	for _, a := range exec0 {
		require.NotContains(t, a, "://", "no URL on the command line: it may hold a password; use the EnvironmentFile")
	}
	shutdown, ok := flagValue(exec0, "shutdown-timeout")
	require.True(t, ok, "ExecStart must set --shutdown-timeout, which TimeoutStopSec is sized from")
	shutdownTimeout, err := time.ParseDuration(shutdown)
	require.NoError(t, err)
	stopTimeout, err := time.ParseDuration(u.get("Service", "TimeoutStopSec"))
	require.NoError(t, err, "TimeoutStopSec")
	require.GreaterOrEqual(t, stopTimeout, shutdownTimeout+outbox.StopGrace+observersStopBound+5*time.Second,
		"TimeoutStopSec must cover --shutdown-timeout, StopGrace, the observers' stop and a margin")
	require.Equal(t, "SIGTERM", u.get("Service", "KillSignal"))
	require.Equal(t, "2", u.get("Service", "RestartPreventExitStatus"), "a usage error (exit 2) is not restarted")
	for key, want := range map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
		"PrivateDevices": "yes", "DynamicUser": "yes", "CapabilityBoundingSet": "", "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
		"SystemCallArchitectures": "native", "MemoryDenyWriteExecute": "yes",
	} {
		vs, ok := u["Service"][key]
		require.True(t, ok, "hardening: %s= is missing", key)
		require.Equal(t, want, vs[len(vs)-1], "hardening: %s", key)
	}

	// The release binary accepts ExecStart's flags.
	binary := releaseBinary(t)
	out, err := exec.CommandContext(t.Context(), binary, append(exec0[1:], "--help")...).CombinedOutput()
	require.NoError(t, err, "outbox %s --help:\n%s", strings.Join(exec0[1:], " "), out)

	// systemd-analyze verify needs ExecStart's binary to exist: verify a
	// copy that runs the release build.
	raw, err := os.ReadFile(unitFile)
	require.NoError(t, err)
	dir := t.TempDir()
	copyFile := filepath.Join(dir, filepath.Base(unitFile))
	require.NoError(t, os.WriteFile(copyFile, []byte(strings.ReplaceAll(string(raw), "ExecStart=/usr/local/bin/outbox ", "ExecStart="+binary+" ")), 0o644))
	out, err = exec.CommandContext(t.Context(), analyze, "verify", "--man=no", copyFile).CombinedOutput()
	require.NoError(t, err, "systemd-analyze verify:\n%s", out)
	require.Empty(t, string(out), "systemd-analyze verify warns")
	out, err = exec.CommandContext(t.Context(), analyze, "security", "--offline=yes", "--threshold=20", copyFile).CombinedOutput()
	require.NoError(t, err, "systemd-analyze security: the exposure is above 2.0:\n%s", out)
	t.Logf("systemd-analyze security: %s", out[strings.LastIndex(string(out[:len(out)-1]), "\n")+1:])
}
