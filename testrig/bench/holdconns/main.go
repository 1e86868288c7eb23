// Command holdconns opens N HTTP keep-alive connections to a server, sends
// one GET on each, reads the answer and then holds them all idle until it
// is interrupted or -hold runs out: the idle-connection flood of the
// delivery contract's figures (testrig/bench/keepalive.sh). It reports how
// many connections answered, and after the hold how many the server closed.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "server host:port")
	n := flag.Int("n", 1000, "connections")
	path := flag.String("path", "/healthz", "path of the one GET per connection")
	hold := flag.Duration("hold", time.Minute, "how long to hold the connections")
	par := flag.Int("parallel", 200, "dials in flight at once")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	conns := make([]net.Conn, *n)
	var ok, failed atomic.Int64
	sem := make(chan struct{}, *par)
	var wg sync.WaitGroup
	for i := range conns {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := net.DialTimeout("tcp", *addr, 10*time.Second)
			if err != nil {
				failed.Add(1)
				return
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", *path, *addr)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				failed.Add(1)
				c.Close()
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			_ = c.SetDeadline(time.Time{})
			conns[i] = c
			ok.Add(1)
		}()
	}
	wg.Wait()
	fmt.Printf("holding %d idle keep-alive connections (%d failed)\n", ok.Load(), failed.Load())
	select {
	case <-ctx.Done():
	case <-time.After(*hold):
	}
	closed := 0
	for _, c := range conns {
		if c == nil {
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			if ne, isNet := err.(net.Error); !isNet || !ne.Timeout() {
				closed++
			}
		}
		c.Close()
	}
	fmt.Printf("after %s: %d of %d closed by the server\n", *hold, closed, ok.Load())
}
