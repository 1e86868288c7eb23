//go:build unix

package discover

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// setMulticastInterface sends c's multicast datagrams out of ifi
// (IP_MULTICAST_IF with one of ifi's IPv4 addresses).
func setMulticastInterface(c *net.UDPConn, ifi *net.Interface) error {
	addrs, err := ifi.Addrs()
	if err != nil {
		return err
	}
	var ip4 [4]byte
	found := false
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			copy(ip4[:], n.IP.To4())
			found = true
			break
		}
	}
	if !found {
		return fmt.Errorf("interface %s has no IPv4 address", ifi.Name)
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInet4Addr(int(fd), syscall.IPPROTO_IP, syscall.IP_MULTICAST_IF, ip4)
	}); err != nil {
		return err
	}
	if serr != nil {
		return errors.Join(errors.New("IP_MULTICAST_IF"), serr)
	}
	return nil
}
