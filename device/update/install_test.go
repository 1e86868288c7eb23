package update

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// swapChild installs a and b over exe by turns, forever (until killed):
// each copied to exe.new and synced, then Install.
func swapChild(exe, a, b string) {
	fmt.Println("ready")
	for i := 0; ; i++ {
		src := a
		if i%2 == 1 {
			src = b
		}
		if err := copyFile(src, exe+StagedSuffix); err != nil {
			fmt.Println("copy:", err)
			os.Exit(1)
		}
		if err := Install(exe+StagedSuffix, exe); err != nil {
			fmt.Println("install:", err)
			os.Exit(1)
		}
	}
}

// kill -9 at random moments of a process installing release after
// release: every time, the binary at the installed path starts and is
// one of the two releases, and so is the kept previous binary.
func TestInstallKilledMidSwap(t *testing.T) {
	nativeExec(t)
	t.Parallel()
	a, b := workerBin(t, "v1.0.0"), workerBin(t, "v1.1.0")
	exe := t.TempDir() + "/termd"
	if err := copyFile(a, exe); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	runs := 40
	if testing.Short() {
		runs = 10
	}
	seenPrev := false
	for i := range runs {
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), "UPDATE_SWAP_CHILD="+exe, "UPDATE_SWAP_A="+a, "UPDATE_SWAP_B="+b)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		if !sc.Scan() || sc.Text() != "ready" {
			t.Fatalf("child: %q", sc.Text())
		}
		time.Sleep(time.Duration(rand.IntN(40000)) * time.Microsecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		rest := ""
		for sc.Scan() {
			rest += sc.Text() + "\n"
		}
		_ = cmd.Wait()
		if rest != "" {
			t.Fatalf("run %d: the child failed: %s", i, rest)
		}
		for _, p := range []string{exe, exe + PrevSuffix} {
			if p != exe && !seenPrev {
				if _, err := os.Stat(p); err != nil {
					continue // killed before any swap kept one
				}
				seenPrev = true // from now on it is always there
			}
			v, err := exec.Command(p, "--version").Output()
			got := strings.TrimSpace(string(v))
			if err != nil || (got != "v1.0.0" && got != "v1.1.0") {
				t.Fatalf("run %d: %s --version: %q, %v", i, p, got, err)
			}
		}
	}
}
