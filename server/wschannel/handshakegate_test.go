package wschannel

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"termlink/internal/testwait"
)

// gatedPipe is a connection the guard admitted (server end) and its
// client end.
func gatedPipe(t *testing.T, g *ConnGuard) (server *guardedConn, client net.Conn) {
	t.Helper()
	s, c := net.Pipe()
	gc := g.admit(s)
	if gc == nil {
		t.Fatal("not admitted")
	}
	t.Cleanup(func() { gc.Close(); c.Close() })
	return gc, c
}

// send writes b from the client end (net.Pipe: until the server reads it).
func send(c net.Conn, b string) { go c.Write([]byte(b)) }

type readResult struct {
	name string
	data string
	err  error
}

func readOne(name string, c net.Conn, out chan<- readResult) {
	b := make([]byte, 16)
	n, err := c.Read(b)
	out <- readResult{name, string(b[:n]), err}
}

func waitGate(t *testing.T, g *ConnGuard, free, waiting int) {
	t.Helper()
	testwait.Until(t, "handshake gate", func() bool {
		f, w := g.gate.stats()
		return f == free && w == waiting
	})
}

// The first bytes of a connection wait for a handshake slot; the newest
// waiter is served first when a slot frees (at the holder's first
// write, or its close), and the one after it next.
func TestHandshakeGateNewestFirst(t *testing.T) {
	g := NewConnGuard(socketsOnly(8))
	g.gate = newHandshakeGate(1)
	a, ac := gatedPipe(t, g)
	b, bc := gatedPipe(t, g)
	c, cc := gatedPipe(t, g)
	got := make(chan readResult, 3)

	send(ac, "a")
	readOne("a", a, got)
	if r := <-got; r.data != "a" || r.err != nil {
		t.Fatalf("first connection: %+v", r)
	}
	waitGate(t, g, 0, 0) // a holds the only slot

	send(bc, "b")
	go readOne("b", b, got)
	waitGate(t, g, 0, 1)
	send(cc, "c")
	go readOne("c", c, got)
	waitGate(t, g, 0, 2)

	go io.Copy(io.Discard, ac)
	if _, err := a.Write([]byte("flight")); err != nil { // a's first write gives its slot back
		t.Fatal(err)
	}
	if r := <-got; r.name != "c" || r.data != "c" || r.err != nil {
		t.Fatalf("after the slot freed: %+v, want the newest waiter (c) served", r)
	}
	waitGate(t, g, 0, 1)
	if _, err := a.Write([]byte("more")); err != nil { // only the first write counts
		t.Fatal(err)
	}
	c.Close() // c held the slot: closing gives it to b
	if r := <-got; r.name != "b" || r.data != "b" || r.err != nil {
		t.Fatalf("after c closed: %+v, want b served", r)
	}
	// A request read (plain HTTP) or a hijack ends b's burst too.
	g.ConnState(b, http.StateActive)
	waitGate(t, g, 1, 0)
}

// A wait for a slot ends at the read deadline, with a timeout error and
// nothing held; closing the connection ends it too.
func TestHandshakeGateDeadlineAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewConnGuard(socketsOnly(8))
		g.gate = newHandshakeGate(1)
		holder, hc := gatedPipe(t, g)
		late, lc := gatedPipe(t, g)
		gone, gc := gatedPipe(t, g)
		got := make(chan readResult, 3)
		send(hc, "h")
		readOne("holder", holder, got)
		<-got

		if err := late.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		send(lc, "l")
		go readOne("late", late, got)
		send(gc, "g")
		go readOne("gone", gone, got)
		synctest.Wait()
		if f, w := g.gate.stats(); f != 0 || w != 2 {
			t.Fatalf("gate free %d waiting %d, want 0 and 2", f, w)
		}
		gone.Close()
		if r := <-got; r.name != "gone" || !errors.Is(r.err, net.ErrClosed) {
			t.Fatalf("closed while waiting: %+v, want net.ErrClosed", r)
		}
		start := time.Now()
		r := <-got
		if r.name != "late" || !errors.Is(r.err, os.ErrDeadlineExceeded) || r.data != "" {
			t.Fatalf("past the deadline: %+v, want os.ErrDeadlineExceeded and no data", r)
		}
		if waited := time.Since(start); waited != 10*time.Second {
			t.Errorf("gave up after %v, want the deadline (10s)", waited)
		}
		if f, w := g.gate.stats(); f != 0 || w != 0 {
			t.Errorf("gate free %d waiting %d, want the holder's slot held and no waiter", f, w)
		}
		holder.Close()
		if f, _ := g.gate.stats(); f != 1 {
			t.Errorf("gate free %d after the holder closed, want 1", f)
		}
	})
}

// Real TLS handshakes through a gate of one slot: each gives its slot
// back at its first flight, so twenty clients at once are all served.
func TestHandshakeGateTLS(t *testing.T) {
	g := NewConnGuard(socketsOnly(64))
	g.gate = newHandshakeGate(1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	srv.Listener = g.Listener(srv.Listener)
	srv.Config.ConnState = g.ConnState
	srv.StartTLS()
	defer srv.Close()

	client := srv.Client()
	client.Transport.(*http.Transport).DisableKeepAlives = true // a handshake per request
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get(srv.URL)
			if err != nil {
				errs <- err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "ok" {
				errs <- errors.New("body " + string(b))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitGate(t, g, 1, 0)
}
