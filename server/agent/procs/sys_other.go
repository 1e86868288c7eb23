//go:build !linux

package procs

import "os/exec"

// Command returns the command that runs shell -c command. Without Linux's
// parent death signal there is no guard: the agent is reaped by the next
// server's Reap only through its recorded group.
func Command(shell, command string) *exec.Cmd { return exec.Command(shell, "-c", command) }

// Exec returns the command that runs program with args, found as sh
// finds it (through sh, which execs it).
func Exec(program string, args ...string) *exec.Cmd {
	return exec.Command("/bin/sh", append([]string{"-c", `exec "$@"`, "sh", program}, args...)...)
}

// spawn runs start: without a parent death signal any thread may fork.
func spawn(start func() error) error { return start() }

// markedProcesses finds nothing where /proc is not available.
func markedProcesses(string) []int { return nil }

// MarkedProcesses lists the live processes carrying marker: none known
// here.
func MarkedProcesses(marker string) []int { return nil }

// SessionMembers lists the processes of a session; only Linux lists them.
func SessionMembers(int) []int { return nil }
