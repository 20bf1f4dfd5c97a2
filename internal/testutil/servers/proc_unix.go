//go:build unix

package servers

import (
	"os"
	"os/exec"
	"syscall"
)

// setGroup makes cmd the leader of a process group of its own.
func setGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// killGroup kills the process group p leads: p and every child it
// started that did not leave the group.
func killGroup(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGKILL) }
