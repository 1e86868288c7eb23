//go:build !unix

package discover

import (
	"fmt"
	"net"
	"runtime"
)

// setMulticastInterface is not done here: on this system Browse takes
// the system's default multicast interface only.
func setMulticastInterface(c *net.UDPConn, ifi *net.Interface) error {
	return fmt.Errorf("choosing the multicast interface is not supported on %s", runtime.GOOS)
}
