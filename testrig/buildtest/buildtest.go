// Package buildtest builds a Go command (a test agent, a daemon) once per
// test process, for tests that run it as a real subprocess.
package buildtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

type build struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

var builds sync.Map // package path -> *build

// Command builds the command of package pkg (such as
// "termlink/testrig/agents/acpagent") the first time a test of this
// process asks for it, and returns the binary's path (in a temporary
// directory). A build that fails fails the test with go build's output.
func Command(tb testing.TB, pkg string) string {
	tb.Helper()
	v, _ := builds.LoadOrStore(pkg, &build{})
	b := v.(*build)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "termlink-build")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, filepath.Base(pkg))
		b.out, b.err = exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput()
	})
	if b.err != nil {
		tb.Fatalf("building %s: %v\n%s", pkg, b.err, b.out)
	}
	return b.path
}
