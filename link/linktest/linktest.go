// Package linktest is a scripted channel server for tests of the device
// end: a real WebSocket server (httptest, loopback, a port the OS picks)
// that answers connect, ping and the frames a device sends, records them,
// and lets the test write any frame to the connected device (deltas,
// replies, progress, notices) at the moment it chooses. It is not
// termserver: it runs no agent and keeps nothing; the test is the agent.
//
// One device connection at a time: a new connect replaces the previous
// connection (as termserver's connection guard does). Every write has a
// deadline; one goroutine serves each connection's reads, and writes are
// serialized.
package linktest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
)

// WriteTimeout bounds every write to the device.
const WriteTimeout = 10 * time.Second

// Server is the scripted server. Its methods are safe for concurrent use.
type Server struct {
	hs *httptest.Server

	mu        sync.Mutex
	onMessage func(s *Server, m *link.Message)
	onCancel  func(s *Server, c *link.Cancel)
	onAnswer  func(s *Server, a *link.Answer)
	wmu       sync.Mutex // one writer at a time
	conn      *websocket.Conn
	conns     int
	connects  []*link.Connect
	messages  []*link.Message
	cancels   []*link.Cancel
	answers   []*link.Answer
	screens   []link.Screen
	others    []link.Frame  // every other frame (fleet operations' answers, notice_ack)
	heartbeat int           // heartbeat_seconds in connected (SetHeartbeat; default 30)
	changed   chan struct{} // closed and replaced on every frame and connect
}

// New starts a server; it is closed when the test ends.
func New(t testing.TB) *Server {
	s := &Server{changed: make(chan struct{}), heartbeat: 30}
	up := websocket.Upgrader{}
	s.hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		s.serve(ws)
	}))
	t.Cleanup(func() {
		s.Drop()
		s.hs.Close()
	})
	return s
}

// URL is the channel URL to give the device.
func (s *Server) URL() string {
	return "ws" + strings.TrimPrefix(s.hs.URL, "http") + "/api/channels/terminal-dev/ws"
}

func (s *Server) poke() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// serve reads the device's frames until the connection ends.
func (s *Server) serve(ws *websocket.Conn) {
	defer ws.Close()
	for {
		_ = ws.SetReadDeadline(time.Now().Add(2 * time.Minute))
		_, data, err := ws.ReadMessage()
		if err != nil {
			s.mu.Lock()
			if s.conn == ws {
				s.conn = nil
				s.poke()
			}
			s.mu.Unlock()
			return
		}
		f, err := link.Decode(data)
		if err != nil {
			_ = s.write(ws, &link.Error{Code: link.CodeBadFrame, Error: err.Error()})
			continue
		}
		s.mu.Lock()
		switch f := f.(type) {
		case *link.Connect:
			old := s.conn
			s.conn = ws
			s.conns++
			s.connects = append(s.connects, f)
			n, hb := s.conns, s.heartbeat
			s.mu.Unlock()
			if old != nil && old != ws {
				old.Close()
			}
			_ = s.write(ws, &link.Connected{ChannelID: "terminal-dev", SessionID: fmt.Sprintf("s-%s-%d", f.PeerID, n), HeartbeatSeconds: hb})
			s.mu.Lock()
			s.poke()
			s.mu.Unlock()
			continue
		case *link.Ping:
			s.mu.Unlock()
			_ = s.write(ws, &link.Pong{})
			continue
		case *link.Message:
			s.messages = append(s.messages, f)
			cb := s.onMessage
			s.poke()
			s.mu.Unlock()
			if cb != nil {
				cb(s, f)
			} else {
				_ = s.write(ws, &link.Ack{MessageID: f.MessageID, SessionID: "s", Accepted: true})
			}
			continue
		case *link.Cancel:
			s.cancels = append(s.cancels, f)
			cb := s.onCancel
			s.poke()
			s.mu.Unlock()
			if cb != nil {
				cb(s, f)
			}
			continue
		case *link.Answer:
			s.answers = append(s.answers, f)
			cb := s.onAnswer
			s.poke()
			s.mu.Unlock()
			if cb != nil {
				cb(s, f)
			} else {
				_ = s.write(ws, &link.Ack{MessageID: f.MessageID, SessionID: "s", Accepted: true})
			}
			continue
		case *link.Screen:
			s.screens = append(s.screens, *f)
		default:
			s.others = append(s.others, f)
		}
		s.poke()
		s.mu.Unlock()
	}
}

// OnMessage sets what the server does with each user message: fn is
// called in the connection's reader goroutine (so frames it sends go out
// before the next message is read). Without it the server acks the
// message and does nothing else.
func (s *Server) OnMessage(fn func(s *Server, m *link.Message)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onMessage = fn
}

// OnCancel sets what the server does with each cancel frame (nothing
// without it), called like OnMessage's fn.
func (s *Server) OnCancel(fn func(s *Server, c *link.Cancel)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onCancel = fn
}

// OnAnswer sets what the server does with each answer frame (capability
// choice), called like OnMessage's fn. Without it the server acks the
// answer (ack.message_id = the answer's) and does nothing else.
func (s *Server) OnAnswer(fn func(s *Server, a *link.Answer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onAnswer = fn
}

// ErrNoDevice: Send found no connected device.
var ErrNoDevice = errors.New("linktest: no device connected")

func (s *Server) write(ws *websocket.Conn, f link.Frame) error {
	return s.writeRaw(ws, link.MustEncode(f))
}

// writeRaw writes one text frame, with a deadline, one writer at a time.
func (s *Server) writeRaw(ws *websocket.Conn, data []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = ws.SetWriteDeadline(time.Now().Add(WriteTimeout))
	return ws.WriteMessage(websocket.TextMessage, data)
}

// Send writes frames to the connected device, in order.
func (s *Server) Send(frames ...link.Frame) error {
	s.mu.Lock()
	ws := s.conn
	s.mu.Unlock()
	if ws == nil {
		return ErrNoDevice
	}
	for _, f := range frames {
		if err := s.write(ws, f); err != nil {
			return fmt.Errorf("linktest: writing a %s frame: %w", f.FrameType(), err)
		}
	}
	return nil
}

// SendRaw writes one text frame as it is (for frames Encode would not
// write).
func (s *Server) SendRaw(data []byte) error {
	s.mu.Lock()
	ws := s.conn
	s.mu.Unlock()
	if ws == nil {
		return ErrNoDevice
	}
	return s.writeRaw(ws, data)
}

// Drop closes the device's connection (it reconnects by itself).
func (s *Server) Drop() {
	s.mu.Lock()
	ws := s.conn
	s.conn = nil
	s.mu.Unlock()
	if ws != nil {
		ws.Close()
	}
}

// Connects is how many connects the server answered.
func (s *Server) Connects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// Connect returns the i-th connect frame (from 0), nil when there is none.
func (s *Server) Connect(i int) *link.Connect {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < 0 || i >= len(s.connects) {
		return nil
	}
	return s.connects[i]
}

// Messages returns the user messages received so far (resends included).
func (s *Server) Messages() []*link.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*link.Message(nil), s.messages...)
}

// Cancels returns the cancel frames received so far.
func (s *Server) Cancels() []*link.Cancel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*link.Cancel(nil), s.cancels...)
}

// Answers returns the answer frames received so far (resends included).
func (s *Server) Answers() []*link.Answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*link.Answer(nil), s.answers...)
}

// Screens returns the screen frames received so far.
func (s *Server) Screens() []link.Screen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]link.Screen(nil), s.screens...)
}

// SetHeartbeat sets the heartbeat_seconds the next connected frames say.
func (s *Server) SetHeartbeat(secs int) {
	s.mu.Lock()
	s.heartbeat = secs
	s.mu.Unlock()
}

// Others returns the frames received so far that are not connect, ping,
// message, cancel, answer or screen (update_status, settings_ack, diag_result,
// notice_ack), in order.
func (s *Server) Others() []link.Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]link.Frame(nil), s.others...)
}

// Wait waits until cond holds (checked after every frame and connect,
// and every 50 ms) or ctx ends.
func (s *Server) Wait(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return nil
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

// WaitFor is Wait with a deadline that fails the test.
func (s *Server) WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := s.Wait(ctx, cond); err != nil {
		t.Fatalf("linktest: waiting for %s: %v", what, err)
	}
}

// Split cuts text into n pieces of about the same length (on rune
// boundaries; fewer when text has fewer runes): the deltas of a reply.
func Split(text string, n int) []string {
	r := []rune(text)
	n = max(min(n, len(r)), 1)
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, string(r[i*len(r)/n:(i+1)*len(r)/n]))
	}
	return out
}

// Deltas returns the delta frames of pieces for messageID, seq from 1.
func Deltas(messageID string, pieces []string) []link.Frame {
	out := make([]link.Frame, len(pieces))
	for i, p := range pieces {
		out[i] = &link.Delta{MessageID: messageID, Seq: int64(i + 1), Text: p}
	}
	return out
}

// Reply is the final assistant message for messageID.
func Reply(messageID, text, finish string) *link.Message {
	return &link.Message{Role: link.RoleAssistant, MessageID: messageID, Text: text, FinishReason: finish}
}
