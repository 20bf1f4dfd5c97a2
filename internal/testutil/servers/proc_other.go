//go:build !unix

package servers

import (
	"os"
	"os/exec"
)

// setGroup does nothing: process groups are a Unix notion.
func setGroup(*exec.Cmd) {}

// killGroup kills p alone.
func killGroup(p *os.Process) error { return p.Kill() }
