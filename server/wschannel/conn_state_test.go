package wschannel

import (
	"fmt"
	"testing"
)

// Every transition of the writer's state machine.
func TestWriterStateTransitions(t *testing.T) {
	tests := []struct {
		from connState
		ev   connEvent
		want connState
	}{
		{connOpen, evGreet, connGreeted},
		{connOpen, evClose, connClosing},
		{connOpen, evStop, connClosed}, // a write failed before connected
		{connGreeted, evGreet, connGreeted},
		{connGreeted, evClose, connClosing},
		{connGreeted, evStop, connClosed},
		{connClosing, evGreet, connClosing}, // connected queued before the close: still closing
		{connClosing, evClose, connClosing},
		{connClosing, evStop, connClosed},
		{connClosed, evGreet, connClosed},
		{connClosed, evClose, connClosed},
		{connClosed, evStop, connClosed},
	}
	for _, tt := range tests {
		if got := nextState(tt.from, tt.ev); got != tt.want {
			t.Errorf("nextState(%s, %d) = %s, want %s", tt.from, tt.ev, got, tt.want)
		}
	}
}

func frameStrings(b *batch) (frames, rest []string) {
	for _, f := range b.frames {
		frames = append(frames, string(f.data))
	}
	for _, n := range b.notices {
		rest = append(rest, string(n))
	}
	for _, r := range b.replies {
		rest = append(rest, string(r.data))
	}
	for _, p := range b.progress {
		rest = append(rest, string(p))
	}
	return frames, rest
}

// Replies, progress and notices wait for connected; notices go at most
// max a batch, in order.
func TestWriterTakeWaitsForConnected(t *testing.T) {
	c := queueConn(2)
	q := c.busy()
	q.frames = []outFrame{{data: []byte("ack")}}
	q.replies = []outFrame{{data: []byte("reply")}}
	q.latest, q.order = map[string][]byte{"m": []byte("progress")}, []string{"m"}
	q.notices = [][]byte{[]byte("n1"), []byte("n2"), []byte("n3")}

	var b batch
	c.take(&b)
	if f, rest := frameStrings(&b); fmt.Sprint(f) != "[ack]" || len(rest) != 0 || c.state != connOpen {
		t.Fatalf("before connected: frames %v, rest %v, state %s; want [ack], nothing else, open", f, rest, c.state)
	}
	b.release()

	q.frames = []outFrame{{data: []byte("connected"), kind: connectedFrame}}
	c.take(&b)
	if f, rest := frameStrings(&b); fmt.Sprint(f) != "[connected]" || fmt.Sprint(rest) != "[n1 n2 reply progress]" || c.state != connGreeted {
		t.Fatalf("with connected: frames %v, rest %v, state %s; want [connected], [n1 n2 reply progress], greeted", f, rest, c.state)
	}
	b.release()
	c.take(&b)
	if _, rest := frameStrings(&b); fmt.Sprint(rest) != "[n3]" || q.notices != nil {
		t.Fatalf("next batch: %v (left %d), want [n3] and nothing left", rest, len(q.notices))
	}
	b.release()
	if c.take(&b); !b.empty() {
		t.Fatalf("nothing queued, batch not empty: %+v", b)
	}
}

// A close before connected is taken: what waits for connected goes only
// if connected is still queued (it goes first); the close frame is last.
func TestWriterCloseBeforeConnected(t *testing.T) {
	for _, greet := range []bool{false, true} {
		t.Run(fmt.Sprintf("connected queued=%v", greet), func(t *testing.T) {
			c := queueConn(4)
			q := c.busy()
			q.frames = []outFrame{{data: []byte("error")}}
			if greet {
				q.frames = append(q.frames, outFrame{data: []byte("connected"), kind: connectedFrame})
			}
			q.replies = []outFrame{{data: []byte("reply")}}
			q.notices = [][]byte{[]byte("n1")}
			if !c.closeLocked() || c.closeLocked() {
				t.Fatal("closeLocked: want true once, then false")
			}
			q.closeFrame = []byte("close")
			var b batch
			c.take(&b)
			f, rest := frameStrings(&b)
			want := "[]"
			if greet {
				want = "[n1 reply]"
			}
			if fmt.Sprint(rest) != want || string(b.closeFrame) != "close" || c.state != connClosing || len(f) != 1+btoi(greet) {
				t.Fatalf("frames %v, rest %v, close %q, state %s; want rest %s, close frame, closing", f, rest, b.closeFrame, c.state, want)
			}
		})
	}
}

// queueConn is a bare connection whose queues are bounded by max.
func queueConn(max int) *wsConn {
	a := &terminalAdapter{}
	a.cfg.Config.SendQueue = max
	return &wsConn{a: a}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
