//go:build unix && !linux

package procs

import (
	"os/exec"
	"syscall"
)

// prepare makes cmd lead a process group unless it will lead a session.
func prepare(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if !cmd.SysProcAttr.Setsid {
		cmd.SysProcAttr.Setpgid = true
	}
}

// startTime is unknown here: recorded groups are never reaped without
// proof that they are ours.
func startTime(int) (uint64, bool) { return 0, false }

// Running tells whether a process with id pid exists.
func Running(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
