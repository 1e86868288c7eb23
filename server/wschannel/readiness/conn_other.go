//go:build !linux

package readiness

import "net"

// Conn is not available here (see Detach).
type Conn struct{ net.Conn }

// Detach reports ErrUnsupported: there is no poller here.
func Detach(*net.TCPConn, *Poller, Readable) (*Conn, error) { return nil, ErrUnsupported }

// DetachInto reports ErrUnsupported: there is no poller here.
func DetachInto(*Conn, *net.TCPConn, *Poller, Readable) error { return ErrUnsupported }

// Handle is nil here.
func (c *Conn) Handle() *Handle { return nil }
