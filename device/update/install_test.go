package update

import (
	"bufio"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kill -9 at random moments of a process installing release after
// release: every time, the binary at the installed path starts and is
// one of the two releases, and so is the kept previous binary.
func TestInstallKilledMidSwap(t *testing.T) {
	nativeExec(t)
	t.Parallel()
	a, b := workerBin(t, "v1.0.0"), workerBin(t, "v1.1.0")
	swapper := build(t, "./testdata/swapper", "")
	exe := t.TempDir() + "/termd"
	if err := CopyFile(a, exe); err != nil {
		t.Fatal(err)
	}
	runs := 40
	if testing.Short() {
		runs = 10
	}
	seenPrev := false
	for i := range runs {
		cmd := exec.Command(swapper, exe, a, b)
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
