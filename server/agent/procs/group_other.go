//go:build !unix

package procs

import "os"

// KillGroup kills the process pgid itself where process groups are not
// available.
func KillGroup(pgid int) error { return killPid(pgid) }

// TerminateGroup kills the process pgid where there is no SIGTERM.
func TerminateGroup(pgid int) error { return killPid(pgid) }

func killPid(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	_ = p.Kill()
	return nil
}
