package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// imageUser is the Containerfile's USER.
const imageUser = "65532:65532"

// buildah runs buildah on a storage of the test's own.
type buildah struct {
	t    *testing.T
	bin  string
	root string
}

func (b buildah) args(args ...string) []string {
	return append([]string{"--storage-driver", "vfs", "--root", filepath.Join(b.root, "root"),
		"--runroot", filepath.Join(b.root, "run")}, args...)
}

// run runs buildah with args and returns its stdout, failing the test on
// an error.
func (b buildah) run(args ...string) string {
	b.t.Helper()
	out, err := b.try(args...)
	require.NoError(b.t, err, "buildah %s:\n%s", strings.Join(args, " "), out)
	return out
}

// try runs buildah with args and returns its stdout, or its stdout and
// stderr after an error.
func (b buildah) try(args ...string) (string, error) {
	stdout, stderr, err := b.exec(args...)
	if err != nil {
		return stdout + stderr, err
	}
	return stdout, nil
}

func (b buildah) exec(args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.bin, b.args(args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// TestContainerImage builds the image with scripts/image (from the shared
// release build), checks its configuration, and runs outbox version and
// outbox demo from it: inside the container with buildah run (chroot
// isolation) where the machine allows it, else from the image's extracted
// filesystem (or when $OUTBOX_TEST_IMAGE_EXTRACTED is set); the log says
// which. Without buildah it fails: scripts/test
// installs it.
func TestContainerImage(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("buildah")
	require.NoError(t, err, "buildah is missing: install Debian's buildah package (apt-get install buildah); scripts/test does")
	binary := releaseBinary(t)
	b := buildah{t: t, bin: bin, root: t.TempDir()}
	t.Cleanup(func() { _, _ = b.try("rm", "--all") })

	const tag = "localhost/outbox:deploytest"
	cmd := exec.CommandContext(t.Context(), "../scripts/image", testVersion)
	cmd.Env = append(os.Environ(), "OUTBOX_IMAGE_BINARY="+binary, "OUTBOX_IMAGE_ROOT="+b.root, "OUTBOX_IMAGE_TAG="+tag)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "scripts/image:\n%s", out)

	var image struct {
		OCIv1 struct {
			Config struct {
				User       string            `json:"User"`
				Entrypoint []string          `json:"Entrypoint"`
				Env        []string          `json:"Env"`
				Labels     map[string]string `json:"Labels"`
			} `json:"config"`
			RootFS struct {
				DiffIDs []string `json:"diff_ids"`
			} `json:"rootfs"`
		} `json:"OCIv1"`
	}
	require.NoError(t, json.Unmarshal([]byte(b.run("inspect", "--type", "image", tag)), &image))
	cfg := image.OCIv1.Config
	require.Equal(t, []string{"outbox"}, cfg.Entrypoint)
	require.Equal(t, imageUser, cfg.User)
	require.Contains(t, cfg.Env, "PATH=/usr/local/bin")
	require.Equal(t, testVersion, cfg.Labels["org.opencontainers.image.version"])
	require.Len(t, image.OCIv1.RootFS.DiffIDs, 1, "FROM scratch and one COPY: one layer")

	ctr := strings.TrimSpace(b.run("from", "--pull=never", tag))
	// The image's entrypoint with its arguments, as podman run IMAGE ARGS
	// would run it, as the image's user.
	inside := func(args ...string) (string, error) {
		stdout, stderr, err := b.exec(append([]string{"run", "--isolation", "chroot", ctr, "--"}, append(cfg.Entrypoint, args...)...)...)
		return stdout + stderr, err
	}
	version, err := inside("version")
	if os.Getenv("OUTBOX_TEST_IMAGE_EXTRACTED") != "" {
		err = errors.New("$OUTBOX_TEST_IMAGE_EXTRACTED is set")
	}
	var demo, root string // root: the filesystem the demo ran on
	if err == nil {
		t.Log("ran outbox version and outbox demo inside the container: buildah run --isolation chroot, as user " + imageUser)
		demo, err = inside("demo")
		require.NoError(t, err, "outbox demo in the container:\n%s", demo)
		root = strings.TrimSpace(b.run("mount", ctr))
		t.Cleanup(func() { _, _ = b.try("umount", ctr) })
	} else {
		t.Logf("buildah run is not possible on this machine (%v: %s); running the binary from the image's extracted filesystem instead", err, version)
		version, demo, root = runExtracted(t, b, ctr)
	}
	require.True(t, strings.HasPrefix(version, "outbox "+testVersion+"\n"), "outbox version:\n%s", version)
	require.Contains(t, demo, "all 3 committed events processed")
	require.Contains(t, demo, "stats: pending 0, processing 0, processed 3, failed 0")

	// The demo wrote its SQLite file under the image's /tmp as the
	// non-root user.
	dir := regexp.MustCompile(`sqlite://(/tmp/outbox-demo-\d+)/demo\.db`).FindStringSubmatch(demo)
	require.NotNil(t, dir, "the demo's database path:\n%s", demo)
	st, err := os.Stat(filepath.Join(root, dir[1]))
	require.NoError(t, err)
	require.EqualValues(t, 65532, st.Sys().(*syscall.Stat_t).Uid, "the demo ran as root")
	tmp, err := os.Stat(filepath.Join(root, "tmp"))
	require.NoError(t, err)
	require.Equal(t, os.ModeDir|os.ModeSticky|0o777, tmp.Mode())
}

// runExtracted runs outbox version and outbox demo from the image's
// filesystem, copied out of the container into a directory the image's user
// can reach: its binary and CA bundle, with its /tmp there. It returns the
// outputs, with that directory cut from the paths, and the directory.
func runExtracted(t *testing.T, b buildah, ctr string) (version, demo, root string) {
	t.Helper()
	mnt := strings.TrimSpace(b.run("mount", ctr))
	defer func() { _, _ = b.try("umount", ctr) }()
	root, err := os.MkdirTemp("", "outbox-image-test-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	for _, f := range []string{"usr/local/bin/outbox", "etc/ssl/certs/ca-certificates.crt"} {
		raw, err := os.ReadFile(filepath.Join(mnt, f))
		require.NoError(t, err)
		st, err := os.Stat(filepath.Join(mnt, f))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, f), raw, st.Mode().Perm()))
	}
	require.NoError(t, os.Mkdir(filepath.Join(root, "tmp"), 0o755))
	require.NoError(t, os.Chmod(filepath.Join(root, "tmp"), os.ModeSticky|0o777))
	run := func(args ...string) string {
		cmd := exec.CommandContext(t.Context(), filepath.Join(root, "usr/local/bin/outbox"), args...)
		cmd.Env = []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"), "TMPDIR=" + filepath.Join(root, "tmp")}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "outbox %s from the extracted image:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	return run("version"), strings.ReplaceAll(run("demo"), root, ""), root
}
