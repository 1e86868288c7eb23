//go:build linux

package procs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"termlink/internal/testwait"
)

// gone tells whether pid no longer runs (a zombie counts as gone: its
// parent, maybe PID 1, has yet to reap it).
func gone(pid int) bool { return !Running(pid) }

func waitGone(t *testing.T, pid int) {
	t.Helper()
	testwait.Until(t, fmt.Sprintf("process %d to end", pid), func() bool { return gone(pid) })
}

func waitFile(t *testing.T, path string) string {
	t.Helper()
	var line string
	testwait.Until(t, path+" to be written", func() bool {
		b, err := os.ReadFile(path)
		line = strings.TrimSpace(string(b))
		return err == nil && bytes.HasSuffix(b, []byte("\n"))
	})
	return line
}

func newRegistry(t *testing.T) *Registry {
	t.Helper()
	r, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// Nothing stands between the agent and its caller: stdin, stdout, exit
// status and death by a signal pass through.
func TestGuardPassesThrough(t *testing.T) {
	tests := []struct {
		name, command, stdin, stdout string
		exit                         int // -1: killed by signal
		signal                       syscall.Signal
	}{
		{"stdin to stdout", "cat", "hello\n", "hello\n", 0, 0},
		{"exit status", "echo out; exit 3", "", "out\n", 3, 0},
		{"command not found", "no-such-command-xyz 2>/dev/null", "", "", 127, 0},
		{"killed by a signal", "kill -9 $$", "", "", -1, syscall.SIGKILL},
		{"terminated", "kill -TERM $$", "", "", -1, syscall.SIGTERM},
	}
	for _, tt := range tests {
		for _, how := range starts {
			t.Run(tt.name+"/"+how, func(t *testing.T) {
				cmd := agentCmd(t, how, tt.command)
				cmd.Stdin = strings.NewReader(tt.stdin)
				out, errb := runGuarded(t, cmd)
				if out.String() != tt.stdout {
					t.Errorf("stdout %q, want %q", out.String(), tt.stdout)
				}
				if errb.Len() > 0 {
					t.Errorf("stderr %q, want none", errb.String())
				}
				ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
				if tt.exit >= 0 && (!ws.Exited() || ws.ExitStatus() != tt.exit) {
					t.Errorf("ended %v, want exit status %d", cmd.ProcessState, tt.exit)
				}
				if tt.exit < 0 && (!ws.Signaled() || ws.Signal() != tt.signal) {
					t.Errorf("ended %v, want signal %v", cmd.ProcessState, tt.signal)
				}
			})
		}
	}
}

// runGuarded starts cmd with a registry, waits for it and returns its
// stdout and stderr.
func runGuarded(t *testing.T, cmd *exec.Cmd) (stdout, stderr *bytes.Buffer) {
	t.Helper()
	r := newRegistry(t)
	stdout, stderr = &bytes.Buffer{}, &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := r.Start(cmd); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	r.Done(cmd.Process.Pid)
	return stdout, stderr
}

// starts are the ways to start an agent.
var starts = []string{"Command", "Exec"}

// agentCmd returns the command that runs body, a sh script: with Command,
// or with Exec of a script file holding it.
func agentCmd(t *testing.T, how, body string) *exec.Cmd {
	t.Helper()
	if how == "Command" {
		return Command("/bin/sh", body)
	}
	p := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return Exec(p)
}

// Exec finds the program as sh does and fails as sh does: 127 when it is
// not found (PATH of the command's environment, relative entries from its
// directory), 126 when it cannot be executed; arguments pass unchanged.
func TestExec(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "bin"), 0o755)
	os.WriteFile(filepath.Join(dir, "bin", "args"), []byte("#!/bin/sh\nprintf '%s|' \"$@\"\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "noexec"), []byte("#!/bin/sh\n"), 0o644)
	tests := []struct {
		argv         []string
		exit         int
		stdout, errs string
	}{
		{[]string{"args", "a b", "", "$HOME *"}, 0, "a b||$HOME *|", ""},
		{[]string{"./bin/args", "x"}, 0, "x|", ""},
		{[]string{"no-such-program-xyz", "x"}, 127, "", "no-such-program-xyz: not found"},
		{[]string{"./noexec"}, 126, "", "Permission denied"},
	}
	for _, tt := range tests {
		cmd := Exec(tt.argv[0], tt.argv[1:]...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=bin:/usr/bin:/bin"}
		out, errb := runGuarded(t, cmd)
		if cmd.ProcessState.ExitCode() != tt.exit || out.String() != tt.stdout || !strings.Contains(errb.String(), tt.errs) {
			t.Errorf("%q: %v, stdout %q, stderr %q; want exit %d, %q, %q", tt.argv, cmd.ProcessState, out.String(), errb.String(), tt.exit, tt.stdout, tt.errs)
		}
	}
}

// When the server ends, the sentinel kills every recorded group: the
// agent and the grandchild it started. Here the sentinel's pipe is
// closed by hand, as the kernel closes it when the server dies, while
// the forking thread (and so the agent's own parent death signal) lives
// on: what dies, the sentinel killed.
func TestSentinelKillsGroupsWhenTheServerEnds(t *testing.T) {
	for _, how := range starts {
		t.Run(how, func(t *testing.T) { testSentinelKillsGroups(t, how) })
	}
}

func testSentinelKillsGroups(t *testing.T, how string) {
	dir := t.TempDir()
	r := newRegistry(t)
	cmd := agentCmd(t, how, "sleep 300 & echo $! > grandchild.pid; echo $$ > agent.pid; wait")
	cmd.Dir = dir
	if err := r.Start(cmd); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = KillGroup(cmd.Process.Pid); _ = cmd.Wait() }()
	grandchild, _ := strconv.Atoi(waitFile(t, filepath.Join(dir, "grandchild.pid")))
	agent, _ := strconv.Atoi(waitFile(t, filepath.Join(dir, "agent.pid")))
	if agent != cmd.Process.Pid {
		t.Errorf("agent pid %d, started %d: something stands between the server and the agent", agent, cmd.Process.Pid)
	}
	r.sentinel.w.Close()
	waitGone(t, agent)
	waitGone(t, grandchild)
	<-r.sentinel.done
}

// A sentinel that died is replaced at the next start.
func TestSentinelRestarted(t *testing.T) {
	r := newRegistry(t)
	start := func() *exec.Cmd {
		cmd := Exec("sleep", "300")
		if err := r.Start(cmd); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = KillGroup(cmd.Process.Pid); _ = cmd.Wait() })
		return cmd
	}
	start()
	first := r.sentinel
	_ = first.cmd.Process.Kill()
	<-first.done
	second := start()
	if r.sentinel == first || !r.sentinel.alive() {
		t.Fatal("no new sentinel after the first one died")
	}
	r.sentinel.w.Close()
	waitGone(t, second.Process.Pid)
}

// SIGTERM to the group lets the agent end gracefully: Wait waits for it.
func TestGuardWaitsForGracefulStop(t *testing.T) {
	dir := t.TempDir()
	r := newRegistry(t)
	cmd := Command("/bin/sh", `trap 'sleep 0.3; echo graceful > done; exit 0' TERM; echo ready > ready; while :; do sleep 0.05; done`)
	cmd.Dir = dir
	if err := r.Start(cmd); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(dir, "ready"))
	if err := TerminateGroup(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if b, _ := os.ReadFile(filepath.Join(dir, "done")); string(b) != "graceful\n" {
		t.Errorf("Wait returned before the agent finished its graceful stop (done=%q, %v)", b, cmd.ProcessState)
	}
}

// Goroutines that lock their thread and end (which ends the thread) do not
// take agents with them: every agent is forked by the one locked thread.
func TestThreadExitDoesNotKillAgents(t *testing.T) {
	r := newRegistry(t)
	cmd := Command("/bin/sh", "exec sleep 300")
	if err := r.Start(cmd); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = KillGroup(cmd.Process.Pid); _ = cmd.Wait() }()
	for range 20 {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		}()
		<-done
	}
	time.Sleep(100 * time.Millisecond)
	if err := syscall.Kill(cmd.Process.Pid, 0); err != nil || gone(cmd.Process.Pid) {
		t.Fatalf("agent died when unrelated threads ended: %v", cmd.ProcessState)
	}
}

// Reap kills what a crashed predecessor left: recorded groups whose
// leader is the recorded process, and marked processes that left the
// group; never a recorded pid whose start time differs, nor an unmarked
// process.
func TestReap(t *testing.T) {
	workspace := t.TempDir()
	old, err := Open(workspace, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(old.Close)
	// A group of the "crashed" server, with a child that stays in it.
	group := Command("/bin/sh", "sleep 300 & echo $! > member.pid; wait")
	group.Dir = workspace
	if err := old.Start(group); err != nil {
		t.Fatal(err)
	}
	go group.Wait()
	member, _ := strconv.Atoi(waitFile(t, filepath.Join(workspace, "member.pid")))
	// A marked process that left the group (setsid, like a daemon).
	escaped := exec.Command("setsid", "sleep", "300")
	escaped.Env = old.Env(os.Environ())
	if err := escaped.Start(); err != nil {
		t.Skip("no setsid:", err)
	}
	go escaped.Wait()
	// An unrelated process whose pid the registry file claims with another
	// start time (a reused pid), and one without the marker.
	stranger := exec.Command("sleep", "300")
	stranger.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stranger.Process.Kill(); _ = stranger.Wait() }()
	old.mu.Lock()
	old.groups[stranger.Process.Pid] = 12345
	old.writeLocked()
	old.mu.Unlock()

	next, err := Open(workspace, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := next.Reap(); err != nil || n < 2 {
		t.Errorf("Reap = %d, %v; want at least 2 kills", n, err)
	}
	waitGone(t, group.Process.Pid)
	waitGone(t, member)
	waitGone(t, escaped.Process.Pid)
	if gone(stranger.Process.Pid) {
		t.Error("Reap killed an unrelated process whose pid was recorded with another start time")
	}
	if b, err := os.ReadFile(filepath.Join(workspace, FileName)); err != nil || len(b) != 0 {
		t.Errorf("registry after Reap: %q, %v; want empty", b, err)
	}
	if pids := MarkedProcesses(next.Marker()); len(pids) != 0 {
		t.Errorf("marked processes left: %v", pids)
	}
}

// The registry file lists running groups and forgets finished ones.
func TestRegistryFile(t *testing.T) {
	workspace := t.TempDir()
	r, err := Open(workspace, nil)
	if err != nil {
		t.Fatal(err)
	}
	cmd := Command("/bin/sh", "exec sleep 300")
	if err := r.Start(cmd); err != nil {
		t.Fatal(err)
	}
	groups, err := readRegistry(filepath.Join(workspace, FileName))
	if st, ok := startTime(cmd.Process.Pid); err != nil || !ok || groups[cmd.Process.Pid] != st {
		t.Errorf("registry %v (%v), want pid %d with start time %d", groups, err, cmd.Process.Pid, st)
	}
	// The environment shows once the new image runs; poll for it (a busy
	// machine was seen reading it a moment too early).
	marker := []byte(MarkerEnv + "=" + r.Marker())
	testwait.Until(t, "the agent's environment to hold the marker", func() bool {
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/environ")
		return bytes.Contains(env, marker)
	})
	// Updated in place (one write, no new file and rename), a shorter
	// list padded: the reader sees the groups still running.
	before, _ := os.Stat(filepath.Join(workspace, FileName))
	r.mu.Lock()
	for _, update := range []func(){
		func() { r.groups[1000001], r.groups[1000002] = 11, 22 },
		func() { delete(r.groups, 1000002) },
	} {
		update()
		r.writeLocked()
		if after, _ := os.Stat(filepath.Join(workspace, FileName)); !os.SameFile(before, after) {
			t.Error("the registry file was replaced, not rewritten")
		}
	}
	r.mu.Unlock()
	groups, err = readRegistry(filepath.Join(workspace, FileName))
	if st, _ := startTime(cmd.Process.Pid); err != nil || len(groups) != 2 || groups[1000001] != 11 || groups[cmd.Process.Pid] != st {
		t.Errorf("registry %v (%v), want pid %d and 1000001", groups, err, cmd.Process.Pid)
	}
	r.Done(1000001)
	_ = KillGroup(cmd.Process.Pid)
	_ = cmd.Wait()
	r.Done(cmd.Process.Pid)
	if groups, err := readRegistry(filepath.Join(workspace, FileName)); err != nil || len(groups) != 0 {
		t.Errorf("registry after Done: %v, %v", groups, err)
	}
	var nilReg *Registry
	if _, err := nilReg.Reap(); err != nil || nilReg.Marker() != "" {
		t.Error("nil registry")
	}
}

// FuzzReadRegistry: any registry file parses without panicking and yields
// only pids above 1 (never 0, 1 or a negative number, which kill(2) takes
// for "every process").
func FuzzReadRegistry(f *testing.F) {
	for _, s := range []string{"123 456\n", "1 2\n0 0\n-5 3\n", "x y\n\n 77  88 \n", "99999999999999999999 1\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "agents.pids")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		groups, _ := readRegistry(path)
		for pid := range groups {
			if pid <= 1 {
				t.Fatalf("pid %d from %q", pid, data)
			}
		}
	})
}

// BenchmarkRegistryStartDone is the registry's part of an agent run:
// recording a group and forgetting it, beside two other running groups.
func BenchmarkRegistryStartDone(b *testing.B) {
	r, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Close)
	r.groups[1000001], r.groups[1000002] = 1, 2
	pid := os.Getpid()
	for b.Loop() {
		r.add(pid)
		r.Done(pid)
	}
}

// BenchmarkStart* start /bin/true and wait for it: with exec.Command
// (no registry bookkeeping of the command's own), with Exec (looked up as
// sh would, then executed directly) and with sh -c (Command). child-ms/op
// is the CPU time of the started processes per run.
func BenchmarkStartNoGuard(b *testing.B) {
	benchStart(b, func() *exec.Cmd { return exec.Command("/bin/true") })
}
func BenchmarkStartExec(b *testing.B) { benchStart(b, func() *exec.Cmd { return Exec("/bin/true") }) }
func BenchmarkStartShell(b *testing.B) {
	benchStart(b, func() *exec.Cmd { return Command("/bin/sh", "/bin/true") })
}

func benchStart(b *testing.B, command func() *exec.Cmd) {
	r, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Close)
	var c0, c1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &c0)
	for b.Loop() {
		cmd := command()
		if err := r.Start(cmd); err != nil {
			b.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
		r.Done(cmd.Process.Pid)
	}
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &c1)
	cpu := c1.Utime.Nano() + c1.Stime.Nano() - c0.Utime.Nano() - c0.Stime.Nano()
	b.ReportMetric(float64(cpu)/1e6/float64(b.N), "child-ms/op")
}
