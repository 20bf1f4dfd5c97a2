package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// testVersion is the version the tests stamp into the release build.
const testVersion = "v0.0.0-deploytest"

// release is one run of scripts/release for linux on this machine's
// architecture, shared by the tests that need a static binary.
var release struct {
	once sync.Once
	dir  string
	out  string
	err  error
}

// releaseBuild runs scripts/release once for linux/GOARCH and returns its
// output directory. The directory is removed by TestMain.
func releaseBuild(t *testing.T) string {
	t.Helper()
	release.once.Do(func() {
		release.dir, release.err = os.MkdirTemp("", "outbox-release-test-")
		if release.err != nil {
			return
		}
		cleanups = append(cleanups, func() { _ = os.RemoveAll(release.dir) })
		// No test context here: the build outlives the test that starts it.
		cmd := exec.Command("../scripts/release", testVersion)
		cmd.Env = append(os.Environ(), "OUTBOX_RELEASE_TARGETS=linux/"+runtime.GOARCH, "OUTBOX_RELEASE_DIR="+release.dir)
		out, err := cmd.CombinedOutput()
		release.out, release.err = string(out), err
	})
	require.NoError(t, release.err, "scripts/release:\n%s", release.out)
	return release.dir
}

// releaseBinary is the linux binary of releaseBuild, for this machine's
// architecture.
func releaseBinary(t *testing.T) string {
	t.Helper()
	return filepath.Join(releaseBuild(t), "outbox-"+testVersion+"-linux-"+runtime.GOARCH)
}

// TestRelease runs scripts/release for one target (linux on this machine's
// architecture; the full six-target run is make release, see DEVELOPERS.md)
// and checks what it wrote: a static binary that reports the stamped
// version, its module list and checksums that verify.
func TestRelease(t *testing.T) {
	t.Parallel()
	dir := releaseBuild(t)
	name := "outbox-" + testVersion + "-linux-" + runtime.GOARCH
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	require.ElementsMatch(t, []string{name, name + ".modules.txt", "SHA256SUMS"}, files)

	out, err := exec.CommandContext(t.Context(), filepath.Join(dir, name), "version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.True(t, strings.HasPrefix(string(out), "outbox "+testVersion+"\n"), "the stamped version:\n%s", out)

	modules, err := os.ReadFile(filepath.Join(dir, name+".modules.txt"))
	require.NoError(t, err)
	for _, want := range []string{"\tpath\tgithub.com/outboxkit/outbox/cmd/outbox\n", "\tmod\tgithub.com/outboxkit/outbox/cmd/outbox\t", "\tdep\tgithub.com/outboxkit/outbox\t",
		"\tdep\tgithub.com/jackc/pgx/v5\tv5.", "\tdep\tmodernc.org/sqlite\tv1.", "\tbuild\tCGO_ENABLED=0\n",
		"\tbuild\t-trimpath=true\n", "\tbuild\tGOOS=linux\n"} {
		require.Contains(t, string(modules), want)
	}
	sums := exec.CommandContext(t.Context(), "sha256sum", "-c", "SHA256SUMS")
	sums.Dir = dir
	out, err = sums.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, name+": OK\n"+name+".modules.txt: OK\n", string(out))
}

func TestReleaseRefusesBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version, targets, want string
	}{
		{"v1 2", "linux/amd64", `invalid version "v1 2"`},
		{"v1.2.3", "linux", `invalid target "linux" in OUTBOX_RELEASE_TARGETS: use OS/ARCH`},
	} {
		cmd := exec.CommandContext(t.Context(), "../scripts/release", tc.version)
		cmd.Env = append(os.Environ(), "OUTBOX_RELEASE_TARGETS="+tc.targets, "OUTBOX_RELEASE_DIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		var exitErr *exec.ExitError
		require.ErrorAs(t, err, &exitErr, "%s", out)
		require.Equal(t, 2, exitErr.ExitCode(), "%s", out)
		require.Contains(t, string(out), tc.want)
	}
}
