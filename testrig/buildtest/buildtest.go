// Package buildtest builds a Go command (a test agent, a daemon) once per
// test process, for tests that run it as a real subprocess.
package buildtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
//
// The binary is built for this machine, not for the architecture the
// test itself was built for: under `make test-arm` the test runs in
// qemu-user with GOARCH=arm in its environment, and a server it runs
// starts the agent with execve, which qemu-user does not follow — the
// kernel runs the program, so it must be native.
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
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		cmd.Env = hostEnv()
		b.out, b.err = cmd.CombinedOutput()
	})
	if b.err != nil {
		tb.Fatalf("building %s: %v\n%s", pkg, b.err, b.out)
	}
	return b.path
}

// hostEnv is the environment without the variables that pick another
// target than this machine.
func hostEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "GOOS", "GOARCH", "GOARM", "GOARM64", "GO386", "GOAMD64", "GOMIPS", "GOMIPS64", "GOPPC64", "GORISCV64", "GOWASM":
			continue
		}
		env = append(env, kv)
	}
	return env
}
