package armtest

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"termlink/server/servertest"
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
// board (the console on its own terminal, in tmux) against a termserver on
// loopback: it comes online, a message typed is answered on its screen, and
// Ctrl-D ends it with status 0.
func TestTermdOnARM(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("runs the ARM builds under qemu-user from an amd64 host; this is %s", runtime.GOARCH)
	}
	srv := servertest.Start(t, nil)
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			qemu := needtool.Path(t, tg.qemu, "apt-get install qemu-user-static; CI installs it")
			termd := buildTermd(t, tg.env, tg.machine)
			state := t.TempDir()
			msg := "hello from " + tg.name
			// The sim board's console is this terminal: a tmux window.
			w := tmuxtest.Start(t, 80, 20, fmt.Sprintf("%s %s --server %s --board sim --state-dir %s --device-name %s-kiosk",
				qemu, termd, srv.Addr, state, tg.name))
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

// buildTermd cross-builds termd (static, no cgo, as make pi does) and
// checks that the binary is for the machine wanted.
func buildTermd(t *testing.T, env []string, machine elf.Machine) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "termd")
	cmd := exec.Command("go", "build", "-o", bin, "termlink/cmd/termd")
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
