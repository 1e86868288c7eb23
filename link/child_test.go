package link_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/testrig/childtest"
)

// The device-reboot test runs this test binary again as a child process
// (TERMLINK_CLIENT_CHILD=mode) and kills it with SIGKILL.
func TestMain(m *testing.M) {
	if mode := os.Getenv("TERMLINK_CLIENT_CHILD"); mode != "" {
		os.Exit(childMain(mode))
	}
	os.Exit(m.Run())
}

// childMain is a device process:
//
//	send          send N messages, print "sent ID" each, wait for their acks, print "acked", hang
//	send-offline  send N messages (server unreachable), print "sent ID" each, then "stored", hang
//	collect       print "reply ID" for each reply; when nothing is pending print "done" and exit
//	notice        for each notice print "notice ID", confirm it (NoticeShown), print "shown ID"
func childMain(mode string) int {
	n, _ := strconv.Atoi(os.Getenv("TERMLINK_CHILD_N"))
	c, err := link.NewClient(link.ClientConfig{URL: os.Getenv("TERMLINK_CHILD_URL"), PeerID: "rebooted-dev",
		StateDir: os.Getenv("TERMLINK_CHILD_STATE"), RetryInitial: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, Logger: discard,
		Capabilities: append(link.DefaultCapabilities(), link.CapNotice)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	go c.Run(context.Background())
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, a ...any) {
		fmt.Fprintf(out, format+"\n", a...)
		out.Flush()
	}
	switch mode {
	case "send", "send-offline":
		sent := map[string]bool{}
		for i := range n {
			id, err := c.Send(context.Background(), fmt.Sprintf("%s %d", mode, i))
			if err != nil {
				fmt.Fprintln(os.Stderr, "child: Send:", err)
				return 2
			}
			sent[id] = true
			say("sent %s", id)
		}
		if mode == "send-offline" {
			say("stored")
		} else {
			acked := map[string]bool{}
			for e := range c.Events() {
				if e.Kind == link.EventAck && sent[e.MessageID] {
					acked[e.MessageID] = true
					if len(acked) == n {
						break
					}
				}
			}
			say("acked")
		}
		for range c.Events() { // keep reading until killed
		}
		select {}
	case "notice":
		for e := range c.Events() {
			if e.Kind == link.EventNotice {
				say("notice %s", e.Notice.NoticeID)
				if err := c.NoticeShown(e.Notice.NoticeID); err != nil {
					fmt.Fprintln(os.Stderr, "child: NoticeShown:", err)
					return 2
				}
				say("shown %s", e.Notice.NoticeID)
			}
		}
		return 1
	case "collect":
		for e := range c.Events() {
			if e.Kind == link.EventReply {
				say("reply %s", e.MessageID)
				if err := c.Delivered(e.MessageID); err != nil {
					fmt.Fprintln(os.Stderr, "child: Delivered:", err)
					return 2
				}
				if c.Status().Pending == 0 {
					c.Close()
					say("done")
					return 0
				}
			}
		}
		return 1
	}
	fmt.Fprintln(os.Stderr, "child: unknown mode", mode)
	return 2
}

// startChild runs childMain in a new process.
func startChild(t *testing.T, mode, url, state string, n int) *childtest.Proc {
	t.Helper()
	return childtest.Start(t, "TERMLINK_CLIENT_CHILD="+mode, "TERMLINK_CHILD_URL="+url,
		"TERMLINK_CHILD_STATE="+state, "TERMLINK_CHILD_N="+strconv.Itoa(n))
}

// replyCounts counts the "reply ID" lines of a collect child per id.
func replyCounts(p *childtest.Proc) map[string]int {
	m := map[string]int{}
	for _, id := range p.Lines("reply ") {
		m[id]++
	}
	return m
}

// fakeServer is a scripted WebSocket peer for the cases the real server
// never produces (double replies, a peer that stops reading).
type fakeServer struct {
	hs    *httptest.Server
	conns chan *websocket.Conn
}

func newFakeServer(t *testing.T) *fakeServer {
	fs := &fakeServer{conns: make(chan *websocket.Conn, 16)}
	up := websocket.Upgrader{}
	var mu sync.Mutex
	var all []*websocket.Conn
	fs.hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		_ = ws.NetConn().(*net.TCPConn).SetReadBuffer(4096)
		mu.Lock()
		all = append(all, ws)
		mu.Unlock()
		fs.conns <- ws
	}))
	t.Cleanup(func() {
		fs.hs.Close()
		mu.Lock()
		for _, ws := range all {
			ws.Close()
		}
		mu.Unlock()
	})
	return fs
}

func (fs *fakeServer) url() string { return "ws" + strings.TrimPrefix(fs.hs.URL, "http") + "/ws" }

type fakeConn struct{ ws *websocket.Conn }

func (fs *fakeServer) accept(t *testing.T) *fakeConn {
	t.Helper()
	select {
	case ws := <-fs.conns:
		return &fakeConn{ws}
	case <-time.After(testwait.Deadline):
		t.Fatal("no connection to the fake server")
		return nil
	}
}

func (c *fakeConn) read(t *testing.T) link.Frame {
	t.Helper()
	// The shared generous deadline: under qemu on a busy machine the
	// client can take more than 10 s over a flood of frames before it
	// answers (TestClientProgressFloodBounded, armv6, stress run 23).
	_ = c.ws.SetReadDeadline(time.Now().Add(testwait.Deadline))
	_, data, err := c.ws.ReadMessage()
	if err != nil {
		t.Fatalf("fake server read: %v", err)
	}
	f, err := link.Decode(data)
	if err != nil {
		t.Fatalf("client sent %s: %v", data, err)
	}
	return f
}

func (c *fakeConn) write(t *testing.T, f link.Frame) {
	t.Helper()
	_ = c.ws.SetWriteDeadline(time.Now().Add(testwait.Deadline))
	if err := c.ws.WriteMessage(websocket.TextMessage, link.MustEncode(f)); err != nil {
		t.Fatalf("fake server write: %v", err)
	}
}

func (c *fakeConn) expectConnect(t *testing.T) {
	t.Helper()
	f, ok := c.read(t).(*link.Connect)
	if !ok || f.PeerID == "" || !slices.Equal(f.Capabilities, []string{link.CapText, link.CapProgress, link.CapCancel}) {
		t.Fatalf("first frame %+v, want connect with peer_id and capabilities text, progress, cancel", f)
	}
}

func (c *fakeConn) readMessage(t *testing.T) *link.Message {
	t.Helper()
	for {
		if m, ok := c.read(t).(*link.Message); ok {
			return m
		}
	}
}

func (c *fakeConn) readUntilPong(t *testing.T) {
	t.Helper()
	for {
		if _, ok := c.read(t).(*link.Pong); ok {
			return
		}
	}
}

// smallBufferDial dials with a small send buffer, so a peer that stops
// reading blocks writes quickly.
func smallBufferDial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		_ = c.(*net.TCPConn).SetWriteBuffer(4096)
	}
	return c, err
}
