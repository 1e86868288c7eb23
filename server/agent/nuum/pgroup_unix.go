//go:build unix

package nuum

import (
	"os/exec"
	"syscall"
)

// setProcGroup makes the command the leader of its own process group, so
// that signalling the group reaches whatever the agent started.
func setProcGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// terminateGroup asks the process group led by pid to stop (SIGTERM).
func terminateGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGTERM) }

// killGroup kills the process group led by pid (SIGKILL).
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
