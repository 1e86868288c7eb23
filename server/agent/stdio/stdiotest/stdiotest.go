// Package stdiotest holds what the tests of the stdio agent runners (Nuum,
// ACP) share: building the example agents, a session recorder as the
// router presents a session, a log recorder to read what happened and in
// which order, and checks on processes. Only tests import it.
package stdiotest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/server/agent"
)

// Main builds each Go package of bins into a temporary directory, sets
// each *bin to its binary, then runs m; it returns the exit code (for a
// TestMain).
func Main(m *testing.M, bins map[*string]string) int {
	dir, err := os.MkdirTemp("", "stdiotest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	// One go command builds them all (into dir, each named after its
	// package's last element): one start and one package load.
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for bin, pkg := range bins {
		*bin = filepath.Join(dir, path.Base(pkg))
		args = append(args, pkg)
	}
	if out, err := exec.Command(goTool, args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building %s: %v\n%s", strings.Join(args[3:], " "), err, out)
		return 1
	}
	return m.Run()
}

// Logger logs to tb at debug level.
func Logger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Recorder is a session as the router presents it: metadata, events and
// progress, recorded.
type Recorder struct {
	Caps      []string // the device's capabilities
	Workspace string

	mu        sync.Mutex
	meta      map[string]any
	metaCalls int
	events    []string
	progress  []string
	onProg    func(string)
}

// Req is a request of the session key with text.
func (rc *Recorder) Req(key, text string) agent.Request {
	return agent.Request{
		ChannelID: "terminal-dev", SessionKey: key, MessageID: fmt.Sprintf("m-%d", time.Now().UnixNano()), Text: text,
		Workspace: rc.Workspace, Capabilities: rc.Caps,
		UpdateMeta: func(ctx context.Context, update func(map[string]any)) error {
			rc.mu.Lock()
			defer rc.mu.Unlock()
			if rc.meta == nil {
				rc.meta = map[string]any{}
			}
			rc.metaCalls++
			update(rc.meta)
			return nil
		},
		Event: func(name, detail string) {
			rc.mu.Lock()
			defer rc.mu.Unlock()
			rc.events = append(rc.events, name+" "+detail)
		},
	}
}

// Progress records a progress line (an agent.Progress).
func (rc *Recorder) Progress(text string) {
	rc.mu.Lock()
	rc.progress = append(rc.progress, text)
	on := rc.onProg
	rc.mu.Unlock()
	if on != nil {
		on(text)
	}
}

// OnProgress makes f see every later progress line.
func (rc *Recorder) OnProgress(f func(string)) {
	rc.mu.Lock()
	rc.onProg = f
	rc.mu.Unlock()
}

// Reset forgets the events and progress.
func (rc *Recorder) Reset() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.events, rc.progress = nil, nil
}

// Snapshot returns the progress and events so far.
func (rc *Recorder) Snapshot() (progress, events []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.progress), slices.Clone(rc.events)
}

// Meta returns the session's metadata and how often it was updated.
func (rc *Recorder) Meta() (map[string]any, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	m := make(map[string]any, len(rc.meta))
	for k, v := range rc.meta {
		m[k] = v
	}
	return m, rc.metaCalls
}

// Await returns the result from ch, failing tb if none comes within
// testwait.Deadline (a guard against a hang).
func Await(tb testing.TB, ch <-chan agent.Result) agent.Result {
	tb.Helper()
	select {
	case res := <-ch:
		return res
	case <-time.After(testwait.Deadline):
		tb.Fatalf("no result within %s", testwait.Deadline)
		return agent.Result{}
	}
}

// Alive reports whether process pid exists and is not a zombie (a killed
// grandchild may wait a while for init to reap it).
func Alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no procfs: trust kill
	}
	// pid (comm) STATE ...; comm may contain spaces and parentheses.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}

// WaitGone waits until process pid no longer exists.
func WaitGone(tb testing.TB, pid int) {
	tb.Helper()
	testwait.Until(tb, fmt.Sprintf("process %d to end", pid), func() bool { return !Alive(pid) })
}
