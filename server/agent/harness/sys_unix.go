//go:build unix

package harness

import (
	"os"
	"syscall"

	"termlink/server/agent/procs"
)

// ptyProcAttr makes a PTY's shell lead a session with the PTY as its
// controlling terminal (as pty.Start would); procs.StartWith then keeps
// it a session leader (no Setpgid) and kills it when the server ends. Its
// foreground job gets the hangup of a terminal whose controlling process
// died; background jobs are reaped by the next server.
func ptyProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Setctty: true}
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
