// Package socktest tells tests which UDP ports this process holds open,
// from /proc (Linux): the sockets among /proc/self/fd matched by inode
// against /proc/net/udp and /proc/net/udp6.
package socktest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// UDPPorts counts this process's UDP sockets by local port.
func UDPPorts() (map[int]int, error) {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, fmt.Errorf("listing /proc/self/fd: %w", err)
	}
	mine := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			mine[strings.TrimSuffix(inode, "]")] = true
		}
	}
	ports := map[int]int{}
	for _, table := range []string{"/proc/net/udp", "/proc/net/udp6"} {
		f, err := os.Open(table)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", table, err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || !mine[fields[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			port, err := strconv.ParseInt(hexPort, 16, 32)
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: local address %q: %w", table, fields[1], err)
			}
			ports[int(port)]++
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", table, err)
		}
	}
	return ports, nil
}
