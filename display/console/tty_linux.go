//go:build linux

package console

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// State is a terminal's saved termios settings, for Restore.
type State struct {
	termios unix.Termios
}

// MakeRaw puts the terminal fd in raw mode (no echo, no line buffering, no
// signals from Ctrl-C, no CR/LF translation, 8-bit) and returns the previous
// state for Restore.
func MakeRaw(fd int) (*State, error) {
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("console: get terminal mode: %w", err)
	}
	old := &State{termios: *t}
	makeRaw(t)
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, t); err != nil {
		return nil, fmt.Errorf("console: set raw mode: %w", err)
	}
	return old, nil
}

// Restore puts the terminal fd back in the state MakeRaw returned.
func Restore(fd int, s *State) error {
	if s == nil {
		return nil
	}
	t := s.termios
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return fmt.Errorf("console: restore terminal mode: %w", err)
	}
	return nil
}

// IsTerminal reports whether fd is a terminal.
func IsTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

func makeRaw(t *unix.Termios) {
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
}

// control runs fn on f's descriptor without taking it out of the runtime
// poller (f.Fd would make it blocking, and deadlines would stop working).
func control(f *os.File, fn func(fd int) error) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := sc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// TerminalSize returns the size of the terminal f (TIOCGWINSZ).
func TerminalSize(f *os.File) (cols, rows int, err error) {
	err = control(f, func(fd int) error {
		ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
		if err != nil {
			return err
		}
		cols, rows = int(ws.Col), int(ws.Row)
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("console: terminal size: %w", err)
	}
	return cols, rows, nil
}

// TTY is a terminal in raw mode: the process's own (OpenTTY) or any
// terminal file (NewTTY). It implements Sizer and Resizer (SIGWINCH) for
// the Console, and read/write deadlines.
type TTY struct {
	f       *os.File
	old     *State
	resized chan struct{}
	sig     chan os.Signal
	done    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	ownFile bool
}

// OpenTTY opens the controlling terminal (/dev/tty) in raw mode.
func OpenTTY() (*TTY, error) {
	f, err := os.OpenFile("/dev/tty", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, unix.ENXIO) {
			return nil, fmt.Errorf("console: open /dev/tty: no controlling terminal (run it in an interactive terminal): %w", err)
		}
		return nil, fmt.Errorf("console: open /dev/tty: %w", err)
	}
	t, err := NewTTY(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	t.ownFile = true
	return t, nil
}

// NewTTY puts the terminal f in raw mode. Close restores the mode; it
// closes f only when OpenTTY opened it.
func NewTTY(f *os.File) (*TTY, error) {
	var old *State
	err := control(f, func(fd int) error {
		var err error
		old, err = MakeRaw(fd)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("console: %s is not a usable terminal: %w", f.Name(), err)
	}
	t := &TTY{
		f:       f,
		old:     old,
		resized: make(chan struct{}, 1),
		sig:     make(chan os.Signal, 1),
		done:    make(chan struct{}),
	}
	signal.Notify(t.sig, syscall.SIGWINCH)
	t.wg.Add(1)
	go t.watch()
	return t, nil
}

func (t *TTY) watch() {
	defer t.wg.Done()
	for {
		select {
		case <-t.done:
			return
		case <-t.sig:
			select {
			case t.resized <- struct{}{}:
			default:
			}
		}
	}
}

// Read reads typed bytes.
func (t *TTY) Read(p []byte) (int, error) { return t.f.Read(p) }

// Write writes to the terminal.
func (t *TTY) Write(p []byte) (int, error) { return t.f.Write(p) }

// SetReadDeadline sets the read deadline (Console uses it to stop reading).
func (t *TTY) SetReadDeadline(d time.Time) error { return t.f.SetReadDeadline(d) }

// SetWriteDeadline sets the write deadline.
func (t *TTY) SetWriteDeadline(d time.Time) error { return t.f.SetWriteDeadline(d) }

// Size returns the terminal size.
func (t *TTY) Size() (cols, rows int, err error) { return TerminalSize(t.f) }

// Resized receives a value after the terminal was resized (SIGWINCH).
func (t *TTY) Resized() <-chan struct{} { return t.resized }

// File returns the terminal file.
func (t *TTY) File() *os.File { return t.f }

// Close restores the terminal mode and stops watching for resizes.
func (t *TTY) Close() error {
	var err error
	t.once.Do(func() {
		signal.Stop(t.sig)
		close(t.done)
		t.wg.Wait()
		err = control(t.f, func(fd int) error { return Restore(fd, t.old) })
		if t.ownFile {
			if cerr := t.f.Close(); err == nil {
				err = cerr
			}
		}
	})
	return err
}
