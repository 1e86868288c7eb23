package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a node may take to exit after SIGTERM before it
// is killed.
const stopGrace = 20 * time.Second

// proc is one run of a child process whose stdout and stderr are
// appended to a log file (kept across restarts, so the file tells the
// node's whole story).
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and been reaped
	err  error         // Wait's result, set before done is closed
}

// startProc starts argv with its output appended to logFile. The child
// runs in its own process group: a signal meant for the parent (Ctrl-C
// in a terminal) does not reach it, the harness stops it.
func startProc(logFile string, env []string, argv ...string) (*proc, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log %s: %w", logFile, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	_ = f.Close() // the child has its own copy
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits until the process is reaped.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits for the exit; after stopGrace, or when
// ctx ends first, the process is killed and stop says so.
func (p *proc) stop(ctx context.Context) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.kill()
		return fmt.Errorf("sending SIGTERM: %w", err)
	}
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		p.kill()
		return fmt.Errorf("did not exit within %v of SIGTERM: killed", stopGrace)
	case <-ctx.Done():
		p.kill()
		return fmt.Errorf("did not exit after SIGTERM before %w: killed", ctx.Err())
	}
}

// killGroup kills whatever is left in the process's group (agent
// processes a killed termserver left behind). The harness calls it when
// it closes a node, never as a fault.
func (p *proc) killGroup() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

// logTail returns the last n lines of a log file, for error messages.
func logTail(file string, n int) string {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	const max = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(st.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
