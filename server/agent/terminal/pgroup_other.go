//go:build !unix

package terminal

import (
	"os"
	"os/exec"
)

// newProcessGroup does nothing where process groups are not available.
func newProcessGroup(*exec.Cmd) {}

// killGroup kills only the process itself where process groups are not
// available.
func killGroup(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	_ = p.Kill()
	return nil
}
