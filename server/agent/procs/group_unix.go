//go:build unix

package procs

import "syscall"

// KillGroup sends SIGKILL to the process group pgid. A group that is
// already gone is not an error.
func KillGroup(pgid int) error { return signalGroup(pgid, syscall.SIGKILL) }

// TerminateGroup asks the process group pgid to stop (SIGTERM).
func TerminateGroup(pgid int) error { return signalGroup(pgid, syscall.SIGTERM) }

func signalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return syscall.EINVAL
	}
	if err := syscall.Kill(-pgid, sig); err != nil && err != syscall.ESRCH {
		return err
	}
	return nil
}

func killPid(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
