//go:build !linux

package console

import (
	"errors"
	"os"
	"time"
)

var errNotLinux = errors.New("console: terminals are only supported on linux")

// TerminalSize is only implemented on Linux.
func TerminalSize(f *os.File) (cols, rows int, err error) { return 0, 0, errNotLinux }

// TTY is only implemented on Linux.
type TTY struct{}

// OpenTTY is only implemented on Linux.
func OpenTTY() (*TTY, error) { return nil, errNotLinux }

// NewTTY is only implemented on Linux.
func NewTTY(f *os.File) (*TTY, error) { return nil, errNotLinux }

func (t *TTY) Read(p []byte) (int, error)         { return 0, errNotLinux }
func (t *TTY) Write(p []byte) (int, error)        { return 0, errNotLinux }
func (t *TTY) SetReadDeadline(d time.Time) error  { return errNotLinux }
func (t *TTY) SetWriteDeadline(d time.Time) error { return errNotLinux }
func (t *TTY) Size() (cols, rows int, err error)  { return 0, 0, errNotLinux }
func (t *TTY) Resized() <-chan struct{}           { return nil }
func (t *TTY) File() *os.File                     { return nil }
func (t *TTY) Close() error                       { return nil }
