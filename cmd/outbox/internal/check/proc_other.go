//go:build !unix

package check

import "syscall"

// childAttr has nothing to set where process groups are not a notion: a
// Ctrl-C may reach the relays too, which then stop gracefully.
func childAttr() *syscall.SysProcAttr { return nil }
