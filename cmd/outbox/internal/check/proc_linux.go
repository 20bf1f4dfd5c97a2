package check

import "syscall"

// childAttr puts a relay in a process group of its own, so a Ctrl-C on the
// terminal reaches only the check (which then stops its relays itself),
// and has the kernel kill it if the check dies without stopping it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
