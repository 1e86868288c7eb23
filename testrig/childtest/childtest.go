// Package childtest runs the test binary again as a child process (a
// device daemon a test kills and restarts) and reads the lines it prints.
// The child is chosen by the environment: the test's TestMain looks for
// its variable and runs the child's code instead of the tests.
package childtest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EmulatorEnv names the environment variable that holds the emulator
// the tests run under: the Makefile's test-arm target runs the ARM test
// binaries with go test -exec qemu-arm-static (or qemu-aarch64-static)
// and sets it to the same program. qemu-user does not follow an execve
// into a child, and without binfmt_misc (containers, CI) the kernel cannot
// run an ARM binary, so a test that starts a program built for its own
// architecture (itself again, or a termd it built) starts it through
// Command, which runs it under the emulator too.
const EmulatorEnv = "TERMLINK_EMULATOR"

// Emulator returns the emulator the tests run under ("" when native).
func Emulator() string { return os.Getenv(EmulatorEnv) }

// Command is exec.Command for a program built for the test binary's
// architecture: under an emulator (Emulator) it runs the program there.
func Command(name string, args ...string) *exec.Cmd {
	if emu := Emulator(); emu != "" {
		return exec.Command(emu, append([]string{name}, args...)...)
	}
	return exec.Command(name, args...)
}

// Proc is a running child.
type Proc struct {
	Cmd    *exec.Cmd
	stderr bytes.Buffer

	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed and replaced on every line
	exited  chan struct{}
}

// Start runs the test binary (no tests) with env added to the
// environment. The child is killed when the test ends.
func Start(t testing.TB, env ...string) *Proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &Proc{changed: make(chan struct{}), exited: make(chan struct{})}
	p.Cmd = Command(exe, "-test.run=^$")
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stderr = &p.stderr
	stdout, err := p.Cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Cmd.Process.Kill()
		<-p.exited
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
		}
		_ = p.Cmd.Wait()
		close(p.exited)
	}()
	return p
}

// WaitLine waits up to timeout for a line starting with prefix and
// returns the rest of it.
func (p *Proc) WaitLine(t testing.TB, prefix string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				p.mu.Unlock()
				return rest
			}
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-p.exited:
			t.Fatalf("child exited without printing %q; output %v; stderr %s", prefix, p.Lines(""), p.stderr.String())
		case <-deadline:
			t.Fatalf("child printed no %q in %v; output %v; stderr %s", prefix, timeout, p.Lines(""), p.stderr.String())
		}
	}
}

// Lines returns the rest of every line printed so far that starts with
// prefix.
func (p *Proc) Lines(prefix string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.lines {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			out = append(out, rest)
		}
	}
	return out
}

// Signal sends sig and waits up to 20s for the child to exit; after
// SIGKILL it checks that the signal is what ended it.
func (p *Proc) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	p.Wait(t, 20*time.Second)
	if ws, ok := p.Cmd.ProcessState.Sys().(syscall.WaitStatus); sig == syscall.SIGKILL && (!ok || ws.Signal() != syscall.SIGKILL) {
		t.Fatalf("child ended with %v, not SIGKILL", p.Cmd.ProcessState)
	}
}

// Wait waits up to timeout for the child to exit.
func (p *Proc) Wait(t testing.TB, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("child did not exit within %v", timeout)
	}
}

// Success fails the test unless the child exited with status 0.
func (p *Proc) Success(t testing.TB) {
	t.Helper()
	if !p.Cmd.ProcessState.Success() {
		t.Fatalf("child: %v; stderr %s", p.Cmd.ProcessState, p.stderr.String())
	}
}

// SkipMulticastUnderEmulator skips a test that joins a multicast group
// (mDNS) when the tests run under qemu-user: qemu does not translate
// IP_ADD_MEMBERSHIP, which fails there with ENODEV ("no such device").
// Natively, and on a real Pi, the test runs.
func SkipMulticastUnderEmulator(t testing.TB) {
	t.Helper()
	if emu := Emulator(); emu != "" {
		t.Skipf("under %s: qemu-user does not emulate joining a multicast group (IP_ADD_MEMBERSHIP fails with ENODEV)", emu)
	}
}
