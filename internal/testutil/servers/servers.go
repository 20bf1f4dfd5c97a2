// Package servers starts servers of the tests' own as child processes (a
// second nats-server, redis-server, Eclipse MQTT broker or RabbitMQ node,
// each with a TLS listener on a free port) and writes the certificates
// they and their clients use. The machine's shared brokers listen in plain TCP; the TLS
// tests of the sink packages (tls_test.go) run against these instead.
//
// A server is started on a free port of 127.0.0.1, waited for with a
// deadline until it answers (by default until it accepts a connection; a
// TLS server until it completes a handshake with the test's own
// certificate, which proves the port is the test's server and not a
// neighbour's), and killed, with its whole process group, by its cleanup:
// after the cleanups registered after it, which may still need it. A
// missing binary fails the test with a message saying what to install; it
// never skips, unless OUTBOX_SKIP_TLS_SERVERS=1 is set (see SkipEnv), for
// machines that cannot run the servers.
package servers

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// SkipEnv names the environment variable that, set to 1 or true, makes the
// tests that start servers of their own skip, for machines without the
// server binaries (without it, a missing binary fails those tests).
const SkipEnv = "OUTBOX_SKIP_TLS_SERVERS"

// ReadyTimeoutDefault bounds a server's start when Spec.ReadyTimeout is 0.
const ReadyTimeoutDefault = 20 * time.Second

// SkipIfDisabled skips t when SkipEnv asks to.
func SkipIfDisabled(t testing.TB) {
	t.Helper()
	if v, _ := strconv.ParseBool(os.Getenv(SkipEnv)); v {
		t.Skipf("%s is set: not starting a server of the test's own", SkipEnv)
	}
}

// Spec says how to start a server.
type Spec struct {
	// Name names the server in messages, such as nats-server.
	Name string
	// Binary is the server's executable, such as /usr/sbin/nats-server.
	// When it does not exist, its base name is looked up in PATH.
	Binary string
	// Args returns the arguments that make the server listen on
	// 127.0.0.1:port. It is called again with another port when the port
	// was taken meanwhile.
	Args func(port int) []string
	// Env is added to the test's environment.
	Env []string
	// Ready reports whether the server at addr is up. Defaults to
	// accepting a TCP connection; see TLSReady.
	Ready func(ctx context.Context, addr string) error
	// ReadyTimeout bounds the wait for Ready. Defaults to
	// ReadyTimeoutDefault.
	ReadyTimeout time.Duration
}

// Server is a running server.
type Server struct {
	// Addr is 127.0.0.1:Port.
	Addr string
	// Port is the port given to Spec.Args.
	Port int

	out *output
}

// Output is what the server wrote to stdout and stderr so far (its last
// 64 KiB).
func (s *Server) Output() string { return s.out.String() }

// Binary returns the path of the executable path, or of its base name in
// PATH, and fails t with a message saying what to install (or to set
// SkipEnv) when neither exists.
func Binary(t testing.TB, name, path string) string {
	t.Helper()
	SkipIfDisabled(t)
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		return path
	}
	found, err := exec.LookPath(filepath.Base(path))
	if err != nil {
		t.Fatalf("%s is not installed: neither %s nor %s in PATH exists; install it, or set %s=1 to skip the tests that start their own TLS servers", name, path, filepath.Base(path), SkipEnv)
	}
	return found
}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// TLSReady is a Spec.Ready that completes a TLS handshake with cfg, which
// should trust only the test's own CA (and present the client certificate
// if the server requires one), so that success means the test's server
// answers on the port.
func TLSReady(cfg *tls.Config) func(ctx context.Context, addr string) error {
	return func(ctx context.Context, addr string) error {
		d := tls.Dialer{Config: cfg}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	}
}

// portTaken matches what the servers print when their port is in use.
var portTaken = regexp.MustCompile(`(?i)address already in use|eaddrinuse`)

// Start starts the server of spec on a free port and waits until it is
// ready; it kills the server and its children when t ends. It fails t when
// the binary is missing, the server exits or it is not ready in time,
// quoting the server's output.
func Start(t testing.TB, spec Spec) *Server {
	t.Helper()
	bin := Binary(t, spec.Name, spec.Binary)
	if spec.Ready == nil {
		spec.Ready = func(ctx context.Context, addr string) error {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return err
			}
			return conn.Close()
		}
	}
	if spec.ReadyTimeout == 0 {
		spec.ReadyTimeout = ReadyTimeoutDefault
	}
	const attempts = 3
	for attempt := 1; ; attempt++ {
		s, err := start(t, spec, bin)
		if err == nil {
			return s
		}
		if attempt == attempts || !errors.Is(err, errPortTaken) {
			t.Fatalf("%v", err)
		}
	}
}

var errPortTaken = errors.New("the port was taken")

// start makes one attempt at starting spec.
func start(t testing.TB, spec Spec, bin string) (*Server, error) {
	t.Helper()
	port := FreePort(t)
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, out: &output{}}
	args := spec.Args(port)
	// The server goes, with its whole process group (RabbitMQ's script
	// runs the Erlang VM, which runs helpers of its own), in its cleanup,
	// not when the test's context ends: that context ends before any
	// cleanup runs, and the cleanups registered after the server (a relay's
	// Stop, a pool's Close) still need it.
	life, kill := context.WithCancel(context.Background())
	cmd := exec.CommandContext(life, bin, args...)
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	setGroup(cmd)
	cmd.Cancel = func() error { return killGroup(cmd.Process) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		kill()
		return nil, fmt.Errorf("start %s (%s): %w", spec.Name, bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // its ProcessState says how it ended
		close(exited)
	}()
	stop := func() {
		kill() // cmd.Cancel kills the group; WaitDelay bounds the wait
		<-exited
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("%s on %s wrote:\n%s", spec.Name, s.Addr, s.Output())
		}
	})

	ctx, cancel := context.WithTimeout(t.Context(), spec.ReadyTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		attemptCtx, cancelAttempt := context.WithTimeout(ctx, time.Second)
		err := spec.Ready(attemptCtx, s.Addr)
		cancelAttempt()
		if err == nil {
			select {
			case <-exited: // answered, but it was not ours
			default:
				return s, nil
			}
		}
		select {
		case <-exited:
			if portTaken.MatchString(s.Output()) {
				return nil, fmt.Errorf("%s: %w: %s", spec.Name, errPortTaken, s.Output())
			}
			return nil, fmt.Errorf("%s %s exited before it was ready (%s); it wrote:\n%s", bin, strings.Join(args, " "), cmd.ProcessState, s.Output())
		case <-ctx.Done():
			stop()
			return nil, fmt.Errorf("%s was not ready on %s within %v (last check: %w); it wrote:\n%s", spec.Name, s.Addr, spec.ReadyTimeout, err, s.Output())
		case <-tick.C:
		}
	}
}

// output keeps the last 64 KiB a server wrote.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const outputMax = 64 << 10

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	if n := o.buf.Len(); n > outputMax {
		o.buf.Next(n - outputMax)
	}
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
