package armtest

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"termlink/testrig/needtool"
	"termlink/testrig/tmuxtest"
)

// The ARM targets termd is released for (make pi).
var targets = []struct {
	name    string
	env     []string
	qemu    string
	machine elf.Machine
}{
	{"armv6", []string{"GOARCH=arm", "GOARM=6"}, "qemu-arm-static", elf.EM_ARM},
	{"arm64", []string{"GOARCH=arm64"}, "qemu-aarch64-static", elf.EM_AARCH64},
}

// termd built for ARMv6 and for arm64, each run under qemu-user on the sim
// board (the console on its own terminal, in tmux) against termserver (built
// for this machine, its own process, the echo agent) on loopback: it comes online, a message typed is answered on its screen, and
// Ctrl-D ends it with status 0.
func TestTermdOnARM(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("runs the ARM builds under qemu-user from an amd64 host; this is %s", runtime.GOARCH)
	}
	// The tools first: nothing is built when one is missing.
	qemu := map[string]string{}
	for _, tg := range targets {
		qemu[tg.name] = needtool.Path(t, tg.qemu, "apt-get install qemu-user-static; CI installs it")
	}
	needtool.Path(t, "tmux", "apt-get install tmux; the sim board's console is a tmux window")
	addr := startTermserver(t)
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			termd := buildTermd(t, tg.env, tg.machine)
			state := t.TempDir()
			msg := "hello from " + tg.name
			// The sim board's console is this terminal: a tmux window.
			w := tmuxtest.Start(t, 80, 20, fmt.Sprintf("%s %s --server %s --board sim --state-dir %s --device-name %s-kiosk",
				qemu[tg.name], termd, addr, state, tg.name))
			// qemu-user is slow to start a Go binary on a busy machine.
			const wait = 60 * time.Second
			w.WaitFor("online", wait)
			w.Type(msg)
			w.Keys("Enter")
			w.WaitFor("You said: "+msg, wait)
			w.Keys("C-d")
			w.WaitFor("EXIT=0", wait)
		})
	}
}

// startTermserver builds termserver for this machine, runs it with its
// default config (channel terminal-dev, the echo agent) in a temporary
// directory on a free loopback port, and returns its address.
func startTermserver(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "termserver")
	if out, err := exec.Command("go", "build", "-o", bin, "termlink/cmd/termserver").CombinedOutput(); err != nil {
		t.Fatalf("go build termserver: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0")
	cmd.Dir = dir // the workspace is ./workspace
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start termserver: %v", err)
	}
	addr := make(chan string, 1)
	done := make(chan struct{})
	var log strings.Builder // written by the reader until done is closed
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	select {
	case a := <-addr:
		return a
	case <-done:
		t.Fatalf("termserver exited before listening:\n%s", log.String())
	case <-time.After(30 * time.Second):
		t.Fatal("termserver did not say it listens in 30 s")
	}
	return ""
}

var listenRE = regexp.MustCompile(`termserver listening"? addr=(\S+)`)

// buildTermd cross-builds termd (static, no cgo, no HTTP/2 in net/http:
// as make pi does) and
// checks that the binary is for the machine wanted.
func buildTermd(t *testing.T, env []string, machine elf.Machine) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "termd")
	cmd := exec.Command("go", "build", "-tags", "nethttpomithttp2", "-o", bin, "termlink/cmd/termd")
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux"), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build termd (%s): %v\n%s", strings.Join(env, " "), err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != machine {
		t.Fatalf("termd built with %v is for %v, want %v", env, f.Machine, machine)
	}
	return bin
}
