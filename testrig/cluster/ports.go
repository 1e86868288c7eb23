package cluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"syscall"
)

// Ports are picked below Linux's ephemeral range (32768-60999): a port
// the kernel hands out for outgoing connections (a load test opens
// thousands) cannot take a stopped node's port before it restarts.
const (
	portLow  = 20000
	portHigh = 32767
)

// freePort returns a loopback TCP port that nobody listens on now. The
// port is free only until someone else binds it: starters retry on
// "address already in use" (addrInUse).
func freePort() (int, error) {
	var last error
	for range 100 {
		p := portLow + rand.IntN(portHigh-portLow+1)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			last = err
			continue
		}
		if err := ln.Close(); err != nil {
			return 0, fmt.Errorf("free port: closing probe listener: %w", err)
		}
		return p, nil
	}
	return 0, fmt.Errorf("free port: no free port in %d-%d after 100 tries: %w", portLow, portHigh, last)
}

// freePorts returns n distinct free ports.
func freePorts(n int) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for len(out) < n {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// errAddrInUse marks a start that failed because a port was taken.
var errAddrInUse = errors.New("address already in use")

// addrInUse reports whether err (or a log excerpt) says a port was taken.
func addrInUse(err error) bool {
	return errors.Is(err, errAddrInUse) || errors.Is(err, syscall.EADDRINUSE)
}
