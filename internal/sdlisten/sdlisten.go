// Package sdlisten takes the listening sockets a parent passed by
// systemd's socket-activation protocol (sd_listen_fds(3)): LISTEN_PID
// names this process, LISTEN_FDS counts the descriptors from 3 on, and
// LISTEN_FDNAMES optionally names them.
//
// A server started this way keeps its port across a restart: the parent
// (systemd's .socket unit) holds the socket while the server is down, so
// a device that dials then waits in the kernel's accept queue and is
// served when the new process starts, instead of being refused and
// backing off.
package sdlisten

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// FirstFD is the first passed descriptor (SD_LISTEN_FDS_START).
const FirstFD = 3

// maxFDs bounds LISTEN_FDS: a parent passing more than this is not
// passing listening sockets to a server of ours.
const maxFDs = 64

// Listener is one passed listening socket.
type Listener struct {
	net.Listener
	FD   int    // its descriptor number as passed (3, 4, ...)
	Name string // its name from LISTEN_FDNAMES ("" when none was given)
}

// Listeners returns the listening sockets passed to this process, or
// none when the environment passes none to it (no LISTEN_FDS, or a
// LISTEN_PID naming another process: variables a parent was given and
// left in its children's environment). Either way it removes the
// variables, so the processes this one starts (agents) do not take them
// as theirs. A passed descriptor that is not a listening stream socket
// is an error naming it; the ones before it are closed then.
func Listeners() ([]Listener, error) {
	pid, fds, names := os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS"), os.Getenv("LISTEN_FDNAMES")
	for _, k := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		os.Unsetenv(k)
	}
	n, err := Count(pid, fds, names, os.Getpid())
	if err != nil || n == 0 {
		return nil, err
	}
	var nameList []string
	if names != "" {
		nameList = strings.Split(names, ":")
	}
	out := make([]Listener, 0, n)
	for i := 0; i < n; i++ {
		fd := FirstFD + i
		name := ""
		if i < len(nameList) {
			name = nameList[i]
		}
		ln, err := fileListener(fd, name)
		if err != nil {
			for _, l := range out {
				l.Close()
			}
			return nil, err
		}
		out = append(out, Listener{Listener: ln, FD: fd, Name: name})
	}
	return out, nil
}

// Count reads the protocol's variables for the process pid: how many
// descriptors were passed to it. 0 with no error when none were (fds
// empty) or when they were passed to another process (pid names another:
// the protocol's rule). A value that cannot be meant (LISTEN_FDS not a
// number, LISTEN_PID missing or not a number, names that do not match
// the count) is an error that says which.
func Count(pid, fds, names string, self int) (int, error) {
	if fds == "" {
		if pid != "" {
			return 0, fmt.Errorf("socket activation: LISTEN_PID=%q without LISTEN_FDS", pid)
		}
		return 0, nil
	}
	if pid == "" {
		return 0, fmt.Errorf("socket activation: LISTEN_FDS=%q without LISTEN_PID (the parent must name the process the sockets are for)", fds)
	}
	p, err := strconv.Atoi(pid)
	if err != nil || p <= 0 {
		return 0, fmt.Errorf("socket activation: LISTEN_PID=%q is not a process id", pid)
	}
	n, err := strconv.Atoi(fds)
	if err != nil || n < 0 || n > maxFDs {
		return 0, fmt.Errorf("socket activation: LISTEN_FDS=%q is not a count of descriptors (0-%d)", fds, maxFDs)
	}
	if p != self {
		return 0, nil
	}
	if names != "" {
		if got := strings.Count(names, ":") + 1; got != n {
			return 0, fmt.Errorf("socket activation: LISTEN_FDNAMES=%q names %d descriptors, LISTEN_FDS=%d", names, got, n)
		}
	}
	return n, nil
}

// fileListener makes a net.Listener of the passed descriptor fd (a
// duplicate with close-on-exec set) and closes fd itself.
func fileListener(fd int, name string) (net.Listener, error) {
	what := fmt.Sprintf("descriptor %d", fd)
	if name != "" {
		what += fmt.Sprintf(" (%q)", name)
	}
	if err := checkListening(fd); err != nil {
		return nil, fmt.Errorf("socket activation: %s: %w", what, err)
	}
	f := os.NewFile(uintptr(fd), "LISTEN_FDS "+strconv.Itoa(fd))
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("socket activation: %s: %w", what, err)
	}
	return ln, nil
}
