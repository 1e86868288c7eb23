//go:build unix

package wschannel

import (
	"net"
	"syscall"
)

// peerClosed says whether the peer of c (a socket) has closed its end:
// a peek that reads end-of-file, without waiting and without taking
// any byte. A socket with bytes waiting, or none yet, is open.
func peerClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true // closed here
	}
	closed := false
	var b [1]byte
	_ = raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = n == 0 && err == nil || err == syscall.ECONNRESET
		return true
	})
	return closed
}
