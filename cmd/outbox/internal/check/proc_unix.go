//go:build unix && !linux

package check

import "syscall"

// childAttr puts a relay in a process group of its own, so a Ctrl-C on the
// terminal reaches only the check, which then stops its relays itself.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
