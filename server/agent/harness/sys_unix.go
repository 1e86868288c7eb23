//go:build unix

package harness

import (
	"os"
	"syscall"
)

// agentProcAttr puts the agent in a process group of its own, so that it
// and everything it starts can be killed together.
func agentProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killGroup kills the process group led by p.
func killGroup(p *os.Process) {
	if p != nil && p.Pid > 0 {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	}
}

// hangUp sends SIGHUP to the process group pgid, as closing a terminal
// does.
func hangUp(pgid int) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGHUP)
	}
}

// killSession kills every process of the session led by sid: its own
// process group and, where the system lists them (Linux /proc), the job
// process groups an interactive shell made inside the session.
func killSession(sid int) {
	if sid <= 0 {
		return
	}
	_ = syscall.Kill(-sid, syscall.SIGKILL)
	for _, pid := range sessionMembers(sid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// setNonblock puts f back in non-blocking mode (Fd made it blocking), so
// that Close interrupts a Read and deadlines work.
func setNonblock(f *os.File) { _ = syscall.SetNonblock(int(f.Fd()), true) }
