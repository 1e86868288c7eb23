//go:build unix

package harness

import (
	"os"
	"syscall"

	"termlink/server/agent/procs"
)

// ptyProcAttr makes a PTY's shell lead a session with the PTY as its
// controlling terminal (as pty.Start would), and hang up, passing the
// hangup on to its jobs, when the server ends (Linux: procs adds the
// parent death signal only when none is set).
func ptyProcAttr() *syscall.SysProcAttr {
	return withDeathSignal(&syscall.SysProcAttr{Setsid: true, Setctty: true}, syscall.SIGHUP)
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
	for _, pid := range procs.SessionMembers(sid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// setNonblock puts f back in non-blocking mode (Fd made it blocking), so
// that Close interrupts a Read and deadlines work.
func setNonblock(f *os.File) { _ = syscall.SetNonblock(int(f.Fd()), true) }
