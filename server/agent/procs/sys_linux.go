package procs

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Command returns the command that runs shell -c command, the shell
// leading the agent's process group. Start it with Registry.Start.
func Command(shell, command string) *exec.Cmd { return exec.Command(shell, "-c", command) }

// Exec returns the command that runs program with args directly, with no
// shell: Start finds program as sh would (PATH of the command's
// environment, relative to its Dir) and reports a missing or
// non-executable program as sh does (exit status 127 or 126, a message
// on stderr). Start it with Registry.Start.
func Exec(program string, args ...string) *exec.Cmd {
	return &exec.Cmd{Path: program, Args: append([]string{program}, args...)}
}

// prepare makes cmd lead a process group (unless it will lead a
// session) and die with the thread that forks it: SIGKILL, unless the
// caller chose another signal.
func prepare(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	a := cmd.SysProcAttr
	if !a.Setsid {
		a.Setpgid = true
	}
	if a.Pdeathsig == 0 {
		a.Pdeathsig = syscall.SIGKILL
	}
}

// forker is the one goroutine, locked to its OS thread for the life of
// the process, that forks every agent: the parent death signal follows
// the forking thread, and this thread never ends before the process.
var forker struct {
	once sync.Once
	jobs chan func()
}

// spawn runs start on the forking thread.
func spawn(start func() error) error {
	forker.once.Do(func() {
		forker.jobs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread must not end or be shared
			for job := range forker.jobs {
				job()
			}
		}()
	})
	done := make(chan error, 1)
	forker.jobs <- func() { done <- start() }
	return <-done
}

// stat returns the fields of /proc/PID/stat after "pid (comm)": f[0] is
// field 3 (state), f[3] field 6 (session), f[19] field 22 (start time).
// comm may hold spaces and parentheses, hence the last ')'.
func stat(pid int) ([]string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, false
	}
	f := strings.Fields(s[i+1:])
	return f, len(f) >= 20
}

// startTime is when the process started, in clock ticks since boot. With
// the pid it names one process for good.
func startTime(pid int) (uint64, bool) {
	f, ok := stat(pid)
	if !ok {
		return 0, false
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	return st, err == nil
}

// Running tells whether pid is a live process: it exists and is not a
// zombie (dead, waiting for whoever inherited it to reap it).
func Running(pid int) bool {
	f, ok := stat(pid)
	return ok && f[0] != "Z" && f[0] != "X"
}

// SessionMembers lists the processes (other than sid itself) whose
// session id is sid: the job process groups an interactive shell made.
func SessionMembers(sid int) []int {
	var pids []int
	eachPid(func(pid int) {
		if pid == sid {
			return
		}
		if f, ok := stat(pid); ok && f[3] == strconv.Itoa(sid) {
			pids = append(pids, pid)
		}
	})
	return pids
}

// eachPid calls fn with the id of every process in /proc.
func eachPid(fn func(pid int)) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			fn(pid)
		}
	}
}

// markedProcesses lists the processes (other than this one) whose
// environment holds MarkerEnv=marker.
func markedProcesses(marker string) []int {
	want := []byte(MarkerEnv + "=" + marker)
	self := os.Getpid()
	var pids []int
	eachPid(func(pid int) {
		if pid == self {
			return
		}
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			return // gone, or not ours to read
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				pids = append(pids, pid)
				return
			}
		}
	})
	return pids
}

// MarkedProcesses lists the live processes carrying marker (tests use
// it to see that no agent survived).
func MarkedProcesses(marker string) []int { return markedProcesses(marker) }
