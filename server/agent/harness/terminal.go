package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/creack/pty"
	"go.bug.st/serial"

	"termlink/server/agent/harness/vt"
	"termlink/server/agent/procs"
)

// terminal is what the agent drives: a tmux pane, a shell in a PTY, or a
// serial console.
type terminal interface {
	// Send sends one command's keystrokes: a key name or literal text.
	Send(ctx context.Context, keystrokes string) error
	// Screen returns the text the screen shows, trailing spaces and
	// empty bottom rows removed. It fails when the terminal is gone.
	Screen(ctx context.Context) (string, error)
	// Alive reports whether the terminal still works (its shell has not
	// exited, the port is open).
	Alive() bool
	// Close tears the terminal down and kills what runs in it.
	Close() error
}

// errGone is the error of a terminal whose shell exited or whose port
// failed.
var errGone = errors.New("the terminal is gone")

// trimScreen removes trailing spaces from each line and the empty lines
// at the bottom.
func trimScreen(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r")
	}
	n := len(lines)
	for n > 0 && lines[n-1] == "" {
		n--
	}
	return strings.Join(lines[:n], "\n")
}

// screenFeed keeps a vt.Screen up to date with what a reader produces and
// writes the screen's answers to queries back. Its goroutine (run) ends
// when the reader fails, i.e. when the terminal is closed or gone.
type screenFeed struct {
	mu   sync.Mutex
	scr  *vt.Screen
	done chan struct{}
	err  error // after done
}

func newScreenFeed(cols, rows int) *screenFeed {
	return &screenFeed{scr: vt.New(cols, rows), done: make(chan struct{})}
}

func (f *screenFeed) run(r io.Reader, reply io.Writer) {
	defer close(f.done)
	buf := make([]byte, 8192)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			f.mu.Lock()
			_, _ = f.scr.Write(buf[:n])
			rep := f.scr.Replies()
			f.mu.Unlock()
			if len(rep) > 0 {
				_, _ = reply.Write(rep)
			}
		}
		if err != nil {
			f.err = err
			return
		}
	}
}

func (f *screenFeed) text() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.scr.String()
}

func (f *screenFeed) alive() bool {
	select {
	case <-f.done:
		return false
	default:
		return true
	}
}

// ---- PTY

// ptyTerm is a shell in a pseudo-terminal, its screen kept by vt.
type ptyTerm struct {
	reg    *procs.Registry
	cmd    *exec.Cmd
	ptmx   *os.File
	feed   *screenFeed
	exited chan struct{}
	once   sync.Once
}

func startPTY(reg *procs.Registry, shell []string, env []string, dir string, cols, rows int) (*ptyTerm, error) {
	cmd := exec.Command(shell[0], shell[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = ptyProcAttr()
	var ptmx *os.File
	err := reg.StartWith(cmd, func() (err error) {
		ptmx, err = pty.StartWithSize(cmd, &pty.Winsize{Rows: uint16(rows), Cols: uint16(cols)})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("start %s in a pty: %w", shell[0], err)
	}
	// pty.Start leaves the master in blocking mode (it calls Fd); make it
	// non-blocking again so that Close interrupts a Read and write
	// deadlines work.
	setNonblock(ptmx)
	t := &ptyTerm{reg: reg, cmd: cmd, ptmx: ptmx, feed: newScreenFeed(cols, rows), exited: make(chan struct{})}
	go t.feed.run(ptmx, ptmx)
	go func() {
		_ = cmd.Wait()
		close(t.exited)
	}()
	return t, nil
}

func (t *ptyTerm) Send(ctx context.Context, keys string) error {
	if keys == "" {
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = t.ptmx.SetWriteDeadline(deadline)
	if _, err := t.ptmx.Write(terminalBytes(keys)); err != nil {
		return fmt.Errorf("type into the pty: %w", err)
	}
	return nil
}

func (t *ptyTerm) Screen(context.Context) (string, error) {
	if !t.Alive() {
		return "", errGone
	}
	return t.feed.text(), nil
}

func (t *ptyTerm) Alive() bool {
	select {
	case <-t.exited:
		return false
	default:
		return t.feed.alive()
	}
}

// Close hangs the terminal up (the shell passes SIGHUP on to its jobs),
// then kills whatever is left of the shell's session.
func (t *ptyTerm) Close() error {
	t.once.Do(func() {
		pid := t.cmd.Process.Pid
		_ = t.ptmx.Close()
		hangUp(pid)
		select {
		case <-t.exited:
		case <-time.After(300 * time.Millisecond):
		}
		killSession(pid)
		<-t.exited
		t.reg.Done(pid)
		<-t.feed.done
	})
	return nil
}

// ---- serial

// serialTerm is a device's serial console: keys are written to the port
// as a terminal would send them, and the board's output is kept by vt.
type serialTerm struct {
	port serial.Port
	path string
	feed *screenFeed
	once sync.Once
}

func openSerial(path string, baud, cols, rows int) (*serialTerm, error) {
	port, err := serial.Open(path, &serial.Mode{BaudRate: baud})
	if err != nil {
		return nil, fmt.Errorf("open serial port %s at %d baud: %w", path, baud, err)
	}
	t := &serialTerm{port: port, path: path, feed: newScreenFeed(cols, rows)}
	// Boards often end lines with a bare "\n".
	t.feed.scr.LFNewline = true
	go t.feed.run(port, port)
	return t, nil
}

func (t *serialTerm) Send(_ context.Context, keys string) error {
	if keys == "" {
		return nil
	}
	if !t.feed.alive() {
		return fmt.Errorf("serial port %s is closed", t.path)
	}
	if _, err := t.port.Write(terminalBytes(keys)); err != nil {
		return fmt.Errorf("write to serial port %s: %w", t.path, err)
	}
	return nil
}

func (t *serialTerm) Screen(context.Context) (string, error) {
	if !t.Alive() {
		return "", errGone
	}
	return t.feed.text(), nil
}

func (t *serialTerm) Alive() bool { return t.feed.alive() }

func (t *serialTerm) Close() error {
	var err error
	t.once.Do(func() {
		err = t.port.Close()
		<-t.feed.done
		var pe *serial.PortError
		if errors.As(err, &pe) && pe.Code() == serial.PortClosed {
			err = nil
		}
	})
	return err
}
