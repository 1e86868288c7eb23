// Command resend measures dedupe after a restart: it reads the session
// files of a termserver workspace (stopped or killed), and for every
// answered message (an assistant record with a message id) connects as the
// session's peer and sends the message id again with its text. A server
// that remembers the id answers ack {duplicate:true}; any other ack means
// the message was run a second time. It prints the counts:
//
//	answered N resent N duplicates D second-runs S busy B
//
// Run it against a server started on the workspace after the kill
// (testrig/bench/restart-dedupe.sh). Sessions go -parallel at a time; the
// ids of one session are sent one after another, each waiting for its ack.
// -last N resends only the last N answered ids of each session. -fresh
// sends one new message id per session instead and prints the time to its
// ack (median and max): the cost of the first unknown id of a session
// after a restart.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
)

type msg struct{ id, text string }

type sess struct {
	peer, thread string
	answered     []msg
}

func main() {
	server := flag.String("server", "ws://127.0.0.1:8080/api/channels/terminal-dev/ws", "the channel's WebSocket URL")
	dir := flag.String("sessions", "", "the workspace's sessions directory (read before the resend)")
	par := flag.Int("parallel", 100, "sessions resent at once")
	last := flag.Int("last", 0, "resend only the last N answered ids of each session (0: all)")
	fresh := flag.Bool("fresh", false, "send one new id per session and time its ack instead")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "resend: -sessions DIR is required")
		os.Exit(2)
	}
	sessions, total, err := readSessions(*dir, *last)
	if err != nil {
		fmt.Fprintln(os.Stderr, "resend:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if *fresh {
		for i := range sessions {
			sessions[i].answered = []msg{{id: fmt.Sprintf("fresh-%d", time.Now().UnixNano()), text: "fresh"}}
		}
	}
	var mu sync.Mutex
	var took []time.Duration
	var resent, dup, again, busy, failed atomic.Int64
	work := make(chan sess)
	var wg sync.WaitGroup
	for range *par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				t0 := time.Now()
				err := resendSession(ctx, *server, s, &resent, &dup, &again, &busy)
				mu.Lock()
				took = append(took, time.Since(t0))
				mu.Unlock()
				if err != nil {
					failed.Add(1)
					fmt.Fprintf(os.Stderr, "resend: peer %s: %v\n", s.peer, err)
				}
			}
		}()
	}
	for _, s := range sessions {
		work <- s
	}
	close(work)
	wg.Wait()
	if *fresh {
		slices.Sort(took)
		fmt.Printf("sessions %d: connect+fresh message acked in median %s, max %s\n", len(took),
			took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
		return
	}
	fmt.Printf("answered %d resent %d duplicates %d second-runs %d busy %d failed-sessions %d\n",
		total, resent.Load(), dup.Load(), again.Load(), busy.Load(), failed.Load())
}

// readSessions reads the answered messages of every session file.
func readSessions(dir string, last int) ([]sess, int, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, 0, err
	}
	var out []sess
	total := 0
	for _, name := range names {
		s, err := readSession(name)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", name, err)
		}
		if last > 0 && len(s.answered) > last {
			s.answered = s.answered[len(s.answered)-last:]
		}
		if s.peer != "" && len(s.answered) > 0 {
			total += len(s.answered)
			out = append(out, s)
		}
	}
	return out, total, nil
}

func readSession(name string) (sess, error) {
	f, err := os.Open(name)
	if err != nil {
		return sess{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var s sess
	texts := map[string]string{}
	seen := map[string]bool{}
	for sc.Scan() {
		var r struct {
			Type      string `json:"_type"`
			Key       string `json:"key"`
			Role      string `json:"role"`
			Content   string `json:"content"`
			MessageID string `json:"message_id"`
		}
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			continue // a torn last line
		}
		switch {
		case r.Type == "metadata":
			parts := strings.Split(r.Key, ":")
			if len(parts) < 3 {
				return sess{}, fmt.Errorf("session key %q is not channel:account:peer[:thread]", r.Key)
			}
			s.peer = parts[2]
			if len(parts) > 3 {
				s.thread = parts[3]
			}
		case r.Role == "user" && r.MessageID != "":
			texts[r.MessageID] = r.Content
		case r.Role == "assistant" && r.MessageID != "" && !seen[r.MessageID]:
			seen[r.MessageID] = true
			s.answered = append(s.answered, msg{r.MessageID, texts[r.MessageID]})
		}
	}
	return s, sc.Err()
}

// resendSession sends every answered id of s again, one at a time.
func resendSession(ctx context.Context, url string, s sess, resent, dup, again, busy *atomic.Int64) error {
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, _, err := d.DialContext(ctx, url, nil)
	if err != nil {
		return err
	}
	defer ws.Close()
	write := func(f link.Frame) error {
		_ = ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
		return ws.WriteMessage(websocket.TextMessage, link.MustEncode(f))
	}
	read := func() (link.Frame, error) {
		_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, data, err := ws.ReadMessage()
		if err != nil {
			return nil, err
		}
		return link.Decode(data)
	}
	if err := write(&link.Connect{PeerID: s.peer, ThreadID: s.thread, Capabilities: []string{link.CapText}}); err != nil {
		return err
	}
	if f, err := read(); err != nil {
		return err
	} else if _, ok := f.(*link.Connected); !ok {
		return fmt.Errorf("connect answered with %s", f.FrameType())
	}
	for _, m := range s.answered {
		for attempt := 0; ; attempt++ {
			if err := write(&link.Message{MessageID: m.id, Text: m.text, ThreadID: s.thread}); err != nil {
				return err
			}
			resent.Add(1)
			ack, retry, err := waitAck(read, m.id)
			if err != nil {
				return err
			}
			if retry && attempt < 50 {
				busy.Add(1)
				resent.Add(-1)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if ack != nil && ack.Duplicate {
				dup.Add(1)
			} else if ack != nil {
				again.Add(1)
			}
			break
		}
	}
	return nil
}

// waitAck reads frames until the ack of id (or an error frame: retry).
func waitAck(read func() (link.Frame, error), id string) (*link.Ack, bool, error) {
	for range 10000 {
		f, err := read()
		if err != nil {
			return nil, false, err
		}
		switch f := f.(type) {
		case *link.Ack:
			if f.MessageID == id {
				return f, false, nil
			}
		case *link.Error:
			return nil, true, nil
		}
	}
	return nil, false, fmt.Errorf("no ack for %s", id)
}
