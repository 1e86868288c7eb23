//go:build !unix

package nuum

import (
	"os"
	"os/exec"
)

// Without process groups only the agent process itself is signalled.

func setProcGroup(*exec.Cmd) {}

func terminateGroup(pid int) { killGroup(pid) }

func killGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}
