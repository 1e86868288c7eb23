package load

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
)

// sharedEdges are the edges of a fake cluster: several WebSocket
// endpoints over one session store, as the spec asks of a cluster. A
// message id seen before is answered with ack duplicate and the cached
// reply (run done) or pending (still running); a run's reply goes to the
// connection its peer has when the run ends, wherever that is.
type sharedEdges struct {
	replyWait time.Duration

	mu      sync.Mutex
	runs    map[string]*link.Message // message id -> reply (nil: running)
	conns   map[string]*edgeConn     // peer id -> its current connection
	started atomic.Int64             // runs started (distinct messages)
	viaAck  atomic.Int64             // cached replies sent in an ack
	runWG   sync.WaitGroup
	active  atomic.Int64
}

type edgeConn struct {
	mu   sync.Mutex
	conn *websocket.Conn
}

func (c *edgeConn) send(f link.Frame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	c.conn.WriteMessage(websocket.TextMessage, link.MustEncode(f))
}

// start serves n edges; it returns their URLs.
func (s *sharedEdges) start(t *testing.T, n int) []string {
	t.Helper()
	s.runs, s.conns = map[string]*link.Message{}, map[string]*edgeConn{}
	var urls []string
	for range n {
		srv := httptest.NewServer(http.HandlerFunc(s.serve))
		t.Cleanup(func() {
			srv.Close()
			waitZero(t, &s.active)
			s.runWG.Wait()
		})
		urls = append(urls, srv.URL)
	}
	return urls
}

func (s *sharedEdges) serve(w http.ResponseWriter, r *http.Request) {
	conn, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
	if err != nil {
		return
	}
	s.active.Add(1)
	defer s.active.Add(-1)
	defer conn.Close()
	c := &edgeConn{conn: conn}
	peer := ""
	defer func() {
		s.mu.Lock()
		if s.conns[peer] == c {
			delete(s.conns, peer)
		}
		s.mu.Unlock()
	}()
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			return
		}
		f, err := link.Decode(data)
		if err != nil {
			continue
		}
		switch f := f.(type) {
		case *link.Connect:
			peer = f.PeerID
			s.mu.Lock()
			s.conns[peer] = c
			s.mu.Unlock()
			c.send(&link.Connected{ChannelID: "terminal-dev", SessionID: "s:" + peer})
		case *link.Ping:
			c.send(&link.Pong{})
		case *link.Message:
			s.mu.Lock()
			reply, seen := s.runs[f.MessageID]
			if !seen {
				s.runs[f.MessageID] = nil
			}
			s.mu.Unlock()
			switch {
			case seen && reply != nil:
				s.viaAck.Add(1)
				c.send(&link.Ack{MessageID: f.MessageID, SessionID: "s:" + peer, Accepted: true, Duplicate: true, Reply: reply})
			case seen:
				c.send(&link.Ack{MessageID: f.MessageID, SessionID: "s:" + peer, Accepted: true, Duplicate: true, Pending: true})
			default:
				s.started.Add(1)
				c.send(&link.Ack{MessageID: f.MessageID, SessionID: "s:" + peer, Accepted: true})
				s.runWG.Add(1)
				time.AfterFunc(s.replyWait, func() {
					defer s.runWG.Done()
					reply := &link.Message{Role: link.RoleAssistant, MessageID: f.MessageID, RunID: "run", Text: f.Text, FinishReason: link.FinishStop}
					s.mu.Lock()
					s.runs[f.MessageID] = reply
					to := s.conns[peer]
					s.mu.Unlock()
					if to != nil {
						to.send(reply)
					}
				})
			}
		}
	}
}

// Devices hop between the edges of a (fake) cluster while replies take
// 200ms: a message cut off by a move is resent on the next edge, which
// answers with ack duplicate and the cached reply, or pending and the
// reply when the run ends. Each message runs once and is counted answered
// once: no duplicate reply, none lost.
func TestMoveSharedSessions(t *testing.T) {
	for _, client := range []bool{false, true} {
		name := "lean"
		if client {
			name = "client"
		}
		t.Run(name, func(t *testing.T) {
			edges := &sharedEdges{replyWait: 200 * time.Millisecond}
			urls := edges.start(t, 2)
			const devices = 6
			rep := runClean(t, Options{URLs: urls, Devices: devices, Rate: 30, Duration: 2 * time.Second,
				Drain: drainAll, Move: 300 * time.Millisecond, Client: client, PeerPrefix: "shared"})
			// A lean device has no duplicate filter: a resend that races
			// its reply (the run ends as the device moves) is answered
			// twice, by the reply and by the ack's cached copy, as the
			// real server does. Each resend can add at most one.
			maxDup := int64(0)
			if !client {
				maxDup = rep.Resent
			}
			checkAnswered(t, rep, devices, maxDup)
			if rep.Moves < devices || rep.MovesFailed != 0 {
				t.Errorf("moves %d failed %d, want every device moved", rep.Moves, rep.MovesFailed)
			}
			if got := edges.started.Load(); got != rep.Sent {
				t.Errorf("%d runs for %d messages: a resend must not start a run again", got, rep.Sent)
			}
			// Which answer a resend gets (pending, or the cached reply)
			// depends on whether its run has ended: either proves the
			// resend, and a busy machine may give only one kind.
			if rep.DuplicateAcks == 0 {
				t.Errorf("duplicate acks %d: no message was cut off by a move, the test proves nothing", rep.DuplicateAcks)
			}
			t.Logf("duplicate acks %d, of which with the cached reply %d", rep.DuplicateAcks, edges.viaAck.Load())
			if !client && rep.Resent == 0 {
				t.Errorf("no message resent")
			}
			var text strings.Builder
			rep.WriteText(&text)
			if !strings.Contains(text.String(), "duplicates    acks ") {
				t.Errorf("text report lacks the duplicates line:\n%s", text.String())
			}
		})
	}
}
