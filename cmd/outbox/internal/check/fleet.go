package check

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// restartDelay is how long a slot waits before it restarts a relay that
// exited on its own (it could not connect, say), so a relay that cannot
// start does not spin.
const restartDelay = 500 * time.Millisecond

// stopTimeout bounds a relay's graceful stop at the end of the run before
// it is killed.
const stopTimeout = 15 * time.Second

// ErrRelayUsage is returned for a relay that exited with the usage exit code: its
// arguments (a --sink URL, a --relay-arg) are wrong, and restarting it
// cannot help.
var ErrRelayUsage = errors.New("a relay refused its arguments")

// fleet runs relays as child processes of the check — the same outbox
// binary, re-executed as outbox relay — one per slot, restarting each one
// that dies until stop.
type fleet struct {
	// ctx ends every relay still running (SIGKILL) when cancelled: the
	// hard stop after stopTimeout.
	ctx    context.Context
	cancel context.CancelFunc
	exe    string
	args   func(slot, gen int) []string
	env    []string

	mu       sync.Mutex
	slots    []*child // the running relay of each slot, nil between two
	stopping bool
	kills    int // SIGKILLs sent
	restarts int // relays started after the first of their slot
	exits    int // relays that exited on their own
	lastExit string
	fatal    chan error // the first ErrRelayUsage
	wg       sync.WaitGroup
}

// child is one relay process.
type child struct {
	cmd    *exec.Cmd
	stderr *tail
	done   chan struct{}
	killed bool // by the check: a kill, not an exit
}

func newFleet(exe string, env []string, n int, args func(slot, gen int) []string) *fleet {
	ctx, cancel := context.WithCancel(context.Background())
	return &fleet{ctx: ctx, cancel: cancel, exe: exe, env: env, args: args, slots: make([]*child, n), fatal: make(chan error, 1)}
}

// start starts every slot's first relay.
func (f *fleet) start() error {
	for slot := range f.slots {
		c, err := f.spawn(slot, 0)
		if err != nil {
			f.stop()
			return err
		}
		f.wg.Add(1)
		go f.supervise(slot, c)
	}
	return nil
}

func (f *fleet) spawn(slot, gen int) (*child, error) {
	cmd := exec.CommandContext(f.ctx, f.exe, f.args(slot, gen)...)
	cmd.Env = f.env
	c := &child{cmd: cmd, stderr: &tail{}, done: make(chan struct{})}
	cmd.Stderr = c.stderr
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start relay: %w", err)
	}
	f.mu.Lock()
	f.slots[slot] = c
	f.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// supervise restarts the slot's relay whenever it dies, until stop.
func (f *fleet) supervise(slot int, c *child) {
	defer f.wg.Done()
	for gen := 1; ; gen++ {
		<-c.done
		f.mu.Lock()
		f.slots[slot] = nil
		if f.stopping {
			f.mu.Unlock()
			return
		}
		killed := c.killed
		if !killed {
			f.exits++
			f.lastExit = fmt.Sprintf("exit code %d: %s", c.cmd.ProcessState.ExitCode(), c.stderr.last())
		}
		f.mu.Unlock()
		if !killed {
			if c.cmd.ProcessState.ExitCode() == 2 {
				select {
				case f.fatal <- fmt.Errorf("%w: %s", ErrRelayUsage, c.stderr.last()):
				default:
				}
				return
			}
			time.Sleep(restartDelay) // a back-off, not a wait for async work
		}
		f.mu.Lock()
		stopping := f.stopping
		f.mu.Unlock()
		if stopping {
			return
		}
		next, err := f.spawn(slot, gen)
		if err != nil {
			select {
			case f.fatal <- err:
			default:
			}
			return
		}
		f.mu.Lock()
		f.restarts++
		f.mu.Unlock()
		c = next
	}
}

// kill SIGKILLs the relay of slot, if one runs; the slot restarts it.
func (f *fleet) kill(slot int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.slots[slot]
	if c == nil || f.stopping {
		return false
	}
	c.killed = true
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return false
	}
	f.kills++
	return true
}

// stop ends every relay gracefully (SIGTERM), kills those still running
// after stopTimeout, and waits for the supervisors.
func (f *fleet) stop() {
	f.mu.Lock()
	f.stopping = true
	running := make([]*child, 0, len(f.slots))
	for _, c := range f.slots {
		if c != nil {
			running = append(running, c)
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	f.mu.Unlock()
	deadline := time.NewTimer(stopTimeout)
	defer deadline.Stop()
	for _, c := range running {
		select {
		case <-c.done:
		case <-deadline.C:
			f.cancel() // kills every relay
			<-c.done
		}
	}
	f.wg.Wait()
	f.cancel()
}

// countsOrZero returns the kills, restarts and own exits so far, and the
// last own exit; zeros for a fleet that never started.
func (f *fleet) countsOrZero() (kills, restarts, exits int, lastExit string) {
	if f == nil {
		return 0, 0, 0, ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kills, f.restarts, f.exits, f.lastExit
}

// tail keeps the last lines a relay wrote on stderr, for the report of a
// relay that exited on its own.
type tail struct {
	mu    sync.Mutex
	lines []string
	part  string
}

const tailLines = 5

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	parts := strings.Split(t.part+string(p), "\n")
	t.part = parts[len(parts)-1]
	for _, l := range parts[:len(parts)-1] {
		if l = strings.TrimSpace(l); l != "" {
			t.lines = append(t.lines, l)
		}
	}
	if len(t.lines) > tailLines {
		t.lines = t.lines[len(t.lines)-tailLines:]
	}
	return len(p), nil
}

// last is the last complete line, or what was written of one.
func (t *tail) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return strings.TrimSpace(t.part)
	}
	return t.lines[len(t.lines)-1]
}

// environ is the check's environment for its relays: env without the
// variables the check sets, plus set.
func environ(env []string, set map[string]string) []string {
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; ok || k == envTestDrop {
			continue
		}
		out = append(out, kv)
	}
	for k, v := range set {
		out = append(out, k+"="+v)
	}
	return out
}
