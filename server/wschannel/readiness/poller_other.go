//go:build !linux

package readiness

import (
	"errors"
	"time"
)

// ErrUnsupported is NewPoller's error where there is no epoll: the
// caller keeps a goroutine per connection.
var ErrUnsupported = errors.New("readiness: no poller on this system")

// ErrClosed is Register's error after Close.
var ErrClosed = errors.New("readiness: poller closed")

// ErrRemoved and ErrTimeout are Wait's errors (never returned here).
var (
	ErrRemoved = errors.New("readiness: socket removed from the poller")
	ErrTimeout = errors.New("readiness: deadline passed")
)

// Poller is not available here (see NewPoller).
type Poller struct{}

// Handle is not available here.
type Handle struct{}

func NewPoller() (*Poller, error)                         { return nil, ErrUnsupported }
func (p *Poller) Register(int, Readable) (*Handle, error) { return nil, ErrUnsupported }
func (p *Poller) Close()                                  {}
func (p *Poller) Len() int                                { return 0 }
func (h *Handle) Arm() bool                               { return false }
func (h *Handle) Armed() bool                             { return false }
func (h *Handle) IfArmed(func()) bool                     { return false }
func (h *Handle) Kick() bool                              { return false }
func (h *Handle) Remove() bool                            { return false }
func (h *Handle) Wait(bool, time.Time) error              { return ErrUnsupported }
func (h *Handle) Wake()                                   {}
func (h *Handle) Waiting() (read, write bool)             { return false, false }
