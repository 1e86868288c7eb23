// Package sdnotify speaks systemd's notify protocol (sd_notify(3)): a
// datagram like "READY=1" to the unix socket named by $NOTIFY_SOCKET, for
// units with Type=notify and WatchdogSec. Without $NOTIFY_SOCKET every
// call does nothing, so a daemon runs the same by hand.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// Notifier sends notifications to systemd.
type Notifier struct {
	addr *net.UnixAddr // nil: not under systemd
}

// FromEnv returns a Notifier for $NOTIFY_SOCKET (an abstract socket when
// it starts with '@').
func FromEnv() *Notifier {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return &Notifier{}
	}
	if path[0] == '@' {
		path = "\x00" + path[1:]
	}
	return &Notifier{addr: &net.UnixAddr{Name: path, Net: "unixgram"}}
}

// Enabled reports whether systemd listens.
func (n *Notifier) Enabled() bool { return n.addr != nil }

// Notify sends state, e.g. "READY=1", "WATCHDOG=1", "STOPPING=1" or
// "STATUS=online".
func (n *Notifier) Notify(state string) error {
	if n.addr == nil {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sdnotify: %s: %w", state, err)
	}
	return nil
}

// WatchdogInterval is how often to send WATCHDOG=1: half of
// $WATCHDOG_USEC, or 0 when systemd set no watchdog for this process.
func WatchdogInterval() time.Duration {
	usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 {
		return 0
	}
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0
	}
	return time.Duration(usec) * time.Microsecond / 2
}
