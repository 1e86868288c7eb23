package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/config"
	"termlink/server/fdbudget"
)

// The descriptor budget keeps its promises under slow clients and busy
// agents (issue 36 rows 2 and 5). These tests run a real Server behind
// its connection guard (Serve on a loopback port of their own) with a
// budget of a small limit in place of RLIMIT_NOFILE, so that a few dozen
// connections fill it.

// fdbServe runs a Server with the default config changed by
// mutate and the descriptor budget of limit, serving on its own loopback
// port until the test ends; it returns the server and its address.
func fdbServe(t *testing.T, limit int, mutate func(*config.Config)) (*Server, string) {
	t.Helper()
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	if mutate != nil {
		mutate(cfg)
	}
	s, err := New(cfg, Options{Logger: quietLog(), fds: fdbudget.New(limit)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, ln.Addr().String()
}

// fdbDevice is a device's connection, dialed and connected.
type fdbDevice struct {
	peer string
	ws   *websocket.Conn
}

// fdbDial upgrades and sends connect as peer; it returns the HTTP
// status of a refused upgrade (503 when the guard finds no descriptor)
// or of an accepted one (101) with the device connected.
func fdbDial(t *testing.T, addr, peer string) (*fdbDevice, int, error) {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+"/api/channels/terminal-dev/ws", nil)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		return nil, status, err
	}
	t.Cleanup(func() { ws.Close() })
	d := &fdbDevice{peer: peer, ws: ws}
	d.send(t, &link.Connect{PeerID: peer, DeviceName: "test-" + peer, Capabilities: []string{link.CapText}})
	f, err := d.next()
	if err != nil {
		return nil, http.StatusSwitchingProtocols, err
	}
	if _, ok := f.(*link.Connected); !ok {
		return nil, http.StatusSwitchingProtocols, fmt.Errorf("got %s, want connected", f.FrameType())
	}
	return d, http.StatusSwitchingProtocols, nil
}

func (d *fdbDevice) send(t *testing.T, f link.Frame) {
	_ = d.ws.SetWriteDeadline(time.Now().Add(testwait.Deadline))
	if err := d.ws.WriteMessage(websocket.TextMessage, link.MustEncode(f)); err != nil {
		t.Errorf("%s: send: %v", d.peer, err)
	}
}

// next reads the next frame (the deadline only keeps a broken test from
// hanging).
func (d *fdbDevice) next() (link.Frame, error) {
	_ = d.ws.SetReadDeadline(time.Now().Add(testwait.Deadline))
	_, data, err := d.ws.ReadMessage()
	if err != nil {
		return nil, err
	}
	return link.Decode(data)
}

// reply reads frames until the reply to id and returns its text, or
// says what came instead.
func (d *fdbDevice) reply(id string) (string, error) {
	for {
		f, err := d.next()
		if err != nil {
			return "", fmt.Errorf("%s: waiting for the reply to %s: %w", d.peer, id, err)
		}
		switch f := f.(type) {
		case *link.Message:
			if f.IsReply() && f.MessageID == id {
				if f.FinishReason == "error" {
					return "", fmt.Errorf("%s: the reply to %s is an error: %q", d.peer, id, f.Text)
				}
				return f.Text, nil
			}
		case *link.Error:
			return "", fmt.Errorf("%s: error frame for %s: %s (%s)", d.peer, id, f.Error, f.Code)
		}
	}
}

// fdbSlowConn opens a connection that sends part of a request line,
// as a client does that sends its headers a byte every few seconds: it
// is in its headers until the header timeout (10 s).
func fdbSlowConn(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET /hea"); err != nil {
		t.Fatal(err)
	}
}

// Connections sending their headers slowly cannot lock devices or
// /healthz out (issue 36 row 2): with every socket of the budget held by
// them, /healthz answers 200 and a device upgrades and connects. Before,
// the guard shed only connections idle between requests, and both got
// 503 until the header timeout (10 s) cut the slow ones, which a client
// reopens at once.
func TestFDBudgetSlowHeaders(t *testing.T) {
	t.Parallel()
	s, addr := fdbServe(t, fdbudget.MinLimit, nil) // 50 sockets
	sockets := s.fds.Max(fdbudget.Sockets)
	for range sockets + 10 {
		fdbSlowConn(t, addr)
	}
	testwait.Until(t, fmt.Sprintf("connections in their headers holding all %d sockets", sockets), func() bool {
		return s.fds.Stats().Used[fdbudget.Sockets] == sockets
	})

	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("/healthz with every socket held by connections in their headers: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz with every socket held by connections in their headers: %d %s, want 200", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if _, status, err := fdbDial(t, addr, "dev-1"); err != nil {
		t.Errorf("a device with every socket held by connections in their headers: HTTP %d, %v; want 101 and connected", status, err)
	}
}

// Busy agents cannot take the sockets' share (issue 36 row 5): with a
// terminal agent (a process per message) whose runs hold every agent
// descriptor they may, more devices than the agents leave room for
// still connect, and every message is answered once the agents finish.
// Before, agents grew into the sockets' share and devices connecting
// after them got 503 (594 of 740 at nofile 1024).
func TestFDBudgetBusyAgents(t *testing.T) {
	t.Parallel()
	const (
		limit    = 256 // 192 shared: sockets keep 161, agents 12 to 23
		blockers = 20  // runs that hold their agent until the gate opens
		devices  = 60  // devices that connect while they do
	)
	gate := filepath.Join(t.TempDir(), "gate")
	s, addr := fdbServe(t, limit, withTerminalAgent(config.TerminalAgent{Command: echoAgent(t), Timeout: 120}))
	maxAgents := min(blockers, s.fds.Max(fdbudget.Agents)/fdbudget.PerAgent)

	type answer struct {
		peer string
		err  error
	}
	answers := make(chan answer, blockers+devices)
	var wg sync.WaitGroup
	ask := func(d *fdbDevice, text, want string) {
		id := "m-" + d.peer
		d.send(t, &link.Message{MessageID: id, Text: text})
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := d.reply(id)
			if err == nil && got != want {
				err = fmt.Errorf("%s: reply %q, want %q", d.peer, got, want)
			}
			answers <- answer{d.peer, err}
		}()
	}
	for i := range blockers {
		d, status, err := fdbDial(t, addr, fmt.Sprintf("blocker-%d", i))
		if err != nil {
			t.Fatalf("blocker %d: HTTP %d, %v", i, status, err)
		}
		ask(d, "/stream-wait "+gate, "before after")
	}
	// The agents hold all they may: every blocker's agent runs, or as
	// many as the agents' share has room for.
	testwait.Until(t, fmt.Sprintf("%d agents running", maxAgents), func() bool {
		return s.fds.Stats().Used[fdbudget.Agents] == maxAgents*fdbudget.PerAgent
	})

	var refused []string
	for i := range devices {
		peer := fmt.Sprintf("dev-%d", i)
		d, status, err := fdbDial(t, addr, peer)
		if err != nil {
			refused = append(refused, fmt.Sprintf("%s: HTTP %d (%v)", peer, status, err))
			continue
		}
		ask(d, "hello", "You said: hello")
	}
	if len(refused) > 0 {
		t.Errorf("%d of %d devices refused while agents were busy (%s):\n  %s", len(refused), devices, s.fds, strings.Join(refused, "\n  "))
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(answers)
	var errs []error
	n := 0
	for a := range answers {
		n++
		errs = append(errs, a.err)
	}
	if err := errors.Join(errs...); err != nil {
		t.Error(err)
	}
	if want := blockers + devices - len(refused); n != want {
		t.Errorf("%d messages answered, want %d", n, want)
	}
}
