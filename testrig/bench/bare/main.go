// Command bare is the yardstick of testrig/bench/compare.sh: a plain
// gorilla/websocket server that speaks the same frames as termserver's
// terminal channel with the built-in echo agent (connect -> connected,
// message -> ack then the assistant reply "You said: ...", ping -> pong),
// encoded by the link package, with no bus, no session log and no agent.
// Each connection is one goroutine that reads a frame and writes its
// answers itself, one WebSocket frame per write; the reply is encoded
// once.
//
//	bare [--listen 127.0.0.1:0] [--channel terminal-dev] [--heartbeat 30] [--wal DIR] [--cpuprofile FILE]
//
// With --wal the yardstick has termserver's durability and nothing else,
// as lean as that floor allows: two records per message, in termserver's
// order. The message (session key and the frame as received) is appended
// to a write-ahead log (termlink/server/wal: one writer goroutine, one
// write and one fdatasync per batch, the waiting connections woken) and
// synced before its ack is sent; then the reply (session key and the
// encoded reply, encoded once for the log and the wire) is synced before
// it is sent. Two sync waits, because termserver's agent runs between
// them: it gets the message only once it is durable, and a real agent's
// reply is not known when the ack is due. (One record for both would
// halve the waits, but only an agent that answers at once allows it.)
// No timer per append: the wait takes the server's context, and the
// writer answers every batch. A failed write or sync fails the log for
// good: every connection waiting on it, and every later message, gets no
// answer and its connection ends. Its latency is the floor the disk sets
// for termserver's, its CPU per reply the floor of the durability path.
//
// --cpuprofile writes a pprof CPU profile of the whole run when it stops.
//
// It prints "listening on ADDR" once it accepts connections, on any path
// (so ws://ADDR/api/channels/terminal-dev/ws works), and stops on SIGINT
// or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/wal"
)

// Same bounds as termserver's terminal channel.
const (
	writeWait       = 10 * time.Second
	maxMessageChars = 20000
	accountID       = "local"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "`address` to listen on")
	channel := flag.String("channel", "terminal-dev", "channel `id` sent in connected and session ids")
	heartbeat := flag.Int("heartbeat", 30, "heartbeat_seconds sent in connected (`seconds`); a device silent for 2.5 of them is dropped")
	walDir := flag.String("wal", "", "make each message and reply durable in a write-ahead log in `dir` before answering (termserver's durability)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to `file` (pprof format) when it stops")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bare:", err)
			os.Exit(1)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s := newServer(*channel, *heartbeat)
	if *walDir != "" {
		wl, err := wal.Open(*walDir, wal.Options{}, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bare:", err)
			os.Exit(1)
		}
		defer wl.Close()
		s.wal = wl
	}
	if err := run(ctx, *listen, s); err != nil {
		fmt.Fprintln(os.Stderr, "bare:", err)
		os.Exit(1)
	}
}

// run serves s on addr until ctx ends.
func run(ctx context.Context, addr string, s *server) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("listening on %s\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		s.Close()
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = hs.Shutdown(sctx)
	s.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// server answers WebSocket upgrades on any path; Close ends every
// connection it has taken and waits for their goroutines.
type server struct {
	channel   string
	heartbeat int
	runPrefix string
	runSeq    atomic.Uint64
	upgrader  websocket.Upgrader
	wal       *wal.Log        // nil: nothing is made durable
	ctx       context.Context // ends when Close begins
	cancel    context.CancelFunc

	mu     sync.Mutex
	conns  map[*websocket.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func newServer(channel string, heartbeat int) *server {
	ctx, cancel := context.WithCancel(context.Background())
	return &server{
		ctx:       ctx,
		cancel:    cancel,
		channel:   channel,
		heartbeat: heartbeat,
		runPrefix: "run-bare-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-",
		upgrader:  websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }},
		conns:     map[*websocket.Conn]struct{}{},
	}
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		fmt.Fprintln(w, "ok")
		return
	}
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered with the reason
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ws.Close()
		return
	}
	s.conns[ws] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	// Like termserver, the connection gets a goroutine of its own and the
	// HTTP handler returns.
	go func() {
		defer s.wg.Done()
		s.serve(ws)
		s.mu.Lock()
		delete(s.conns, ws)
		s.mu.Unlock()
		ws.Close()
	}()
}

// Close closes every connection and waits until their goroutines end.
func (s *server) Close() {
	s.cancel()
	s.mu.Lock()
	s.closed = true
	for ws := range s.conns {
		ws.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// conn is the state of one connection, owned by its goroutine.
type conn struct {
	s          *server
	ws         *websocket.Conn
	sessionKey string
	buf        []byte // reused for every frame written
	rec        []byte // reused for every log record and its reply
}

// serve reads and answers frames until the connection ends.
func (s *server) serve(ws *websocket.Conn) {
	c := &conn{s: s, ws: ws}
	ws.SetReadLimit(link.ReadLimit(maxMessageChars))
	idle := time.Duration(s.heartbeat) * time.Second * 5 / 2
	for {
		if idle > 0 {
			if err := ws.SetReadDeadline(time.Now().Add(idle)); err != nil {
				return
			}
		}
		typ, data, err := ws.ReadMessage()
		if err != nil {
			return
		}
		if typ != websocket.TextMessage {
			if !c.send(&link.Error{Error: "only text frames carry JSON frames", Code: link.CodeBadFrame}) {
				return
			}
			continue
		}
		if !c.handle(data) {
			return
		}
	}
}

// handle answers one frame; false when a write failed.
func (c *conn) handle(data []byte) bool {
	f, err := link.Decode(data)
	if err != nil {
		return c.send(&link.Error{Error: err.Error(), Code: link.CodeBadFrame})
	}
	switch f := f.(type) {
	case *link.Ping:
		return c.send(&link.Pong{})
	case *link.Pong:
		return true
	case *link.Connect:
		if f.PeerID == "" {
			return c.send(&link.Error{Error: `connect frame: field "peer_id" is missing or empty`, Code: link.CodeBadFrame})
		}
		key := c.s.channel + ":" + accountID + ":" + f.PeerID
		if f.ThreadID != "" {
			key += ":" + f.ThreadID
		}
		c.sessionKey = key
		return c.send(&link.Connected{ChannelID: c.s.channel, SessionID: key, HeartbeatSeconds: c.s.heartbeat})
	case *link.Message:
		switch {
		case c.sessionKey == "":
			return c.send(&link.Error{Error: "send a connect frame with your peer_id before message frames", MessageID: f.MessageID, Code: link.CodeNotConnected})
		case f.IsReply() || strings.TrimSpace(f.Text) == "":
			return c.send(&link.Error{Error: "message " + f.MessageID + ": not user text", MessageID: f.MessageID, Code: link.CodeBadMessage})
		}
		runID := c.s.runPrefix + strconv.FormatUint(c.s.runSeq.Add(1), 10)
		reply := &link.Message{Role: link.RoleAssistant, MessageID: f.MessageID, RunID: runID,
			Text: agent.EchoReply(f.Text), FinishReason: link.FinishStop}
		// The message as received, durable before its ack.
		c.rec = append(append(c.rec[:0], c.sessionKey...), '\n')
		c.rec = append(c.rec, data...)
		if !c.durable(c.rec) || !c.send(&link.Ack{MessageID: f.MessageID, SessionID: c.sessionKey, Accepted: true}) {
			return false
		}
		// The reply, encoded once (into the log record and onto the
		// wire), durable before it is sent.
		c.rec = append(append(c.rec[:0], c.sessionKey...), '\n')
		at := len(c.rec)
		var err error
		if c.rec, err = link.AppendEncode(c.rec, reply); err != nil {
			return false
		}
		return c.durable(c.rec) && c.write(c.rec[at:])
	default:
		return c.send(&link.Error{Error: fmt.Sprintf("unsupported frame type %s", f.FrameType()), Code: link.CodeBadFrame})
	}
}

// durable appends rec (the session key, a newline and a frame) to the
// write-ahead log as one record and waits until it is synced, when the server has one; false
// when the log failed or the server is closing. The wait takes the
// server's context, not a timer of its own: the log's writer answers
// every batch it takes (synced or failed), so nothing waits forever.
func (c *conn) durable(rec []byte) bool {
	if c.s.wal == nil {
		return true
	}
	_, err := c.s.wal.Append(c.s.ctx, rec)
	return err == nil
}

// send writes one frame, with a deadline; false when the write failed.
func (c *conn) send(f link.Frame) bool {
	var err error
	if c.buf, err = link.AppendEncode(c.buf[:0], f); err != nil {
		return false
	}
	return c.write(c.buf)
}

// write writes one encoded frame, with a deadline; false when the write
// failed.
func (c *conn) write(frame []byte) bool {
	if c.ws.SetWriteDeadline(time.Now().Add(writeWait)) != nil {
		return false
	}
	return c.ws.WriteMessage(websocket.TextMessage, frame) == nil
}
