package main_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
)

// binary is the outbox command built once by TestMain.
var binary string

var leakOptions = []goleak.Option{
	// The shared test pool lives for the whole test binary.
	goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
	goleak.IgnoreAnyFunction("github.com/jackc/puddle/v2.(*Pool[...]).createIdleResources"),
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outbox-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "outbox")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/outboxkit/outbox/cmd/outbox")...)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the outbox binary: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(leakOptions...); err != nil {
			fmt.Fprintf(os.Stderr, "goroutine leak: %v\n", err)
			code = 1
		}
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// result is how a run of the binary ended.
type result struct {
	code           int
	stdout, stderr string
}

// environ is the test process's environment without the variables the
// binary reads, plus extra.
func environ(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OUTBOX_") || strings.HasPrefix(kv, "PGPASSWORD=") || strings.HasPrefix(kv, "GORACE=") {
			continue
		}
		env = append(env, kv)
	}
	// A race-enabled binary sleeps a second before exiting unless told not
	// to; a race it finds makes it exit 66, which fails the test.
	env = append(env, "GORACE=atexit_sleep_ms=0")
	return append(env, extra...)
}

// run runs the binary with args to completion.
func run(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = environ(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := result{stdout: stdout.String(), stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		res.code = exitErr.ExitCode()
	default:
		t.Fatalf("run outbox %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// outboxCmd runs the binary against schema with the test database.
func outboxCmd(t *testing.T, schema string, args ...string) result {
	t.Helper()
	return run(t, nil, append([]string{"--database-url", testutil.DatabaseURL(), "--schema", schema}, args...)...)
}

// requireOK checks that a run succeeded and printed nothing on stderr.
func requireOK(t *testing.T, res result) {
	t.Helper()
	require.Equal(t, 0, res.code, "exit code; stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	require.Empty(t, res.stderr)
}

// requireFail checks that a run exited with code and printed one error
// line, prefixed outbox:, that contains each of want.
func requireFail(t *testing.T, res result, code int, want ...string) {
	t.Helper()
	require.Equal(t, code, res.code, "exit code; stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	line := strings.TrimSuffix(res.stderr, "\n")
	require.NotContains(t, line, "\n", "stderr must be one line:\n%s", res.stderr)
	require.True(t, strings.HasPrefix(line, "outbox: "), "stderr must start with outbox: %q", line)
	for _, w := range want {
		require.Contains(t, line, w)
	}
	require.NotContains(t, res.stderr, "Usage:")
	require.NotContains(t, res.stderr, "goroutine ")
}

// eventsBundle is a migrated schema with a writer and a manager.
type eventsBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	mgr    *outbox.Manager
}

func setup(t *testing.T) eventsBundle {
	t.Helper()
	pool, schema := testutil.Schema(t)
	return eventsBundle{
		ctx: context.Background(), pool: pool, schema: schema,
		mgr: outbox.NewManager(outbox.Postgres(pool), outbox.ManagerConfig{Schema: schema}),
	}
}

// write commits msgs with the Go writer and returns their IDs.
func (b eventsBundle) write(t *testing.T, msgs ...outbox.Message) []int64 {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	res, err := outbox.NewWriter(outbox.WriterConfig{Schema: b.schema}).Write(b.ctx, tx, msgs...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	return res.IDs
}

// writeN commits n order.created events.
func (b eventsBundle) writeN(t *testing.T, n int) []int64 {
	t.Helper()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: fmt.Sprint(i + 1),
			Payload: map[string]int{"n": i + 1}}
	}
	return b.write(t, msgs...)
}

// exec runs sql on the outbox table: {table} stands for it.
func (b eventsBundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, strings.ReplaceAll(sql, "{table}", testutil.Table(b.schema)), args...)
	require.NoError(t, err)
}

// setFailed dead-letters id with lastError.
func (b eventsBundle) setFailed(t *testing.T, id int64, lastError string) {
	t.Helper()
	b.exec(t, `UPDATE {table} SET status = 'failed', attempts = 5, last_error = $2, updated_at = now() WHERE id = $1`, id, lastError)
}

// setProcessed marks id processed.
func (b eventsBundle) setProcessed(t *testing.T, id int64) {
	t.Helper()
	b.exec(t, `UPDATE {table} SET status = 'processed', processed_at = now(), updated_at = now() WHERE id = $1`, id)
}

func (b eventsBundle) event(t *testing.T, id int64) outbox.Event {
	t.Helper()
	e, err := b.mgr.Event(b.ctx, id)
	require.NoError(t, err)
	return e
}

func (b eventsBundle) stats(t *testing.T) outbox.Stats {
	t.Helper()
	s, err := b.mgr.Stats(b.ctx)
	require.NoError(t, err)
	return s
}

// syncBuffer is a bytes.Buffer that a child process writes while the test
// reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// process is a running outbox binary.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
	err            error
}

// start starts the binary with args; it is killed at cleanup if still
// running.
func start(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(binary, args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = environ(env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// stop sends sig and returns the exit code.
func (p *process) stop(t *testing.T, sig os.Signal) int {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("outbox did not exit within 30s of %v; stderr:\n%s", sig, p.stderr.String())
	}
	var exitErr *exec.ExitError
	if errors.As(p.err, &exitErr) {
		return exitErr.ExitCode()
	}
	require.NoError(t, p.err)
	return 0
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
