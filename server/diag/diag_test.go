package diag

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/internal/syncbuf"
	"termlink/link"
)

// sent records the frames Requests hands to the connections.
type sent struct {
	mu     sync.Mutex
	frames []*link.Diag
	refuse bool
	next   chan *link.Diag
}

func (s *sent) send(_, _ string, f link.Frame) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse {
		return false
	}
	d := f.(*link.Diag)
	s.frames = append(s.frames, d)
	if s.next != nil {
		s.next <- d
	}
	return true
}

func newRequests(t *testing.T, maxPeer, maxTotal int) (*Requests, *sent, *syncbuf.Buffer) {
	logs := &syncbuf.Buffer{}
	s := &sent{next: make(chan *link.Diag, 64)}
	return New(Options{Send: s.send, MaxPerPeer: maxPeer, MaxTotal: maxTotal, Log: slog.New(slog.NewTextHandler(logs, nil))}), s, logs
}

// A request goes out as a diag frame and its answer comes back to the
// caller; the waiting place is freed.
func TestRequestAnswered(t *testing.T) {
	r, s, _ := newRequests(t, 0, 0)
	type out struct {
		res *link.DiagResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := r.Request(context.Background(), "ch", "kiosk-1", link.DiagLogs, 1000)
		done <- out{res, err}
	}()
	d := <-s.next
	if d.Kind != link.DiagLogs || d.Bytes != 1000 || !strings.HasPrefix(d.RequestID, "diag-") {
		t.Fatalf("sent %+v", d)
	}
	r.Report("ch", "kiosk-1", &link.DiagResult{RequestID: d.RequestID, Kind: link.DiagLogs, Text: "line\n", OK: true})
	o := <-done
	if o.err != nil || o.res.Text != "line\n" {
		t.Fatalf("Request = %+v, %v", o.res, o.err)
	}
	if n := r.Waiting(); n != 0 {
		t.Fatalf("%d still waiting", n)
	}
}

// A result of another peer, or for nobody, is dropped with a log line
// and leaves the request waiting; the request ends with its context.
func TestResultDropped(t *testing.T) {
	r, s, logs := newRequests(t, 0, 0)
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := r.Request(ctx, "ch", "kiosk-1", link.DiagSelftest, 0)
		errc <- err
	}()
	d := <-s.next
	r.Report("ch", "kiosk-2", &link.DiagResult{RequestID: d.RequestID, Kind: link.DiagSelftest, OK: true})
	r.Report("other", "kiosk-1", &link.DiagResult{RequestID: d.RequestID, Kind: link.DiagSelftest, OK: true})
	r.Report("ch", "kiosk-1", &link.DiagResult{RequestID: "diag-unknown", Kind: link.DiagSelftest})
	r.Report("ch", "kiosk-1", &link.SettingsAck{Version: 1}) // not ours: ignored
	if r.Waiting() != 1 {
		t.Fatalf("waiting %d", r.Waiting())
	}
	gone := errors.New("the operator went away")
	cancel(gone)
	if err := <-errc; !errors.Is(err, gone) {
		t.Fatalf("Request = %v, want the context's cause", err)
	}
	// Too late now.
	r.Report("ch", "kiosk-1", &link.DiagResult{RequestID: d.RequestID, Kind: link.DiagSelftest})
	l := logs.String()
	if strings.Count(l, "diag result dropped") != 4 || !strings.Contains(l, "the request was sent to another device") ||
		!strings.Contains(l, "nobody waits for it") || r.Waiting() != 0 {
		t.Fatalf("waiting %d, log:\n%s", r.Waiting(), l)
	}
}

// Bounds: MaxPerPeer per device, MaxTotal in all, each past them an
// error at once; a connection that does not take the frame, a bad kind
// or size are errors too; none of them keeps a place.
func TestRequestBounds(t *testing.T) {
	r, s, _ := newRequests(t, 2, 3)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, peer := range []string{"a", "a", "b"} {
		wg.Add(1)
		go func() { defer wg.Done(); r.Request(ctx, "ch", peer, link.DiagLogs, 10) }()
		<-s.next
	}
	if _, err := r.Request(ctx, "ch", "a", link.DiagLogs, 10); !errors.Is(err, ErrTooMany) || !strings.Contains(err.Error(), "2 for peer a already (at most 2)") {
		t.Fatalf("third for a: %v", err)
	}
	if _, err := r.Request(ctx, "ch", "c", link.DiagLogs, 10); !errors.Is(err, ErrTooMany) || !strings.Contains(err.Error(), "3 on this server already (at most 3)") {
		t.Fatalf("fourth in all: %v", err)
	}
	cancel()
	wg.Wait()
	s.mu.Lock()
	s.refuse = true
	s.mu.Unlock()
	if _, err := r.Request(context.Background(), "ch", "a", link.DiagLogs, 10); !errors.Is(err, ErrNotSent) {
		t.Fatalf("not taken: %v", err)
	}
	for _, c := range []struct {
		kind  string
		bytes int
		want  string
	}{{"dump", 0, `kind "dump"`}, {link.DiagLogs, -1, "got -1"}, {link.DiagLogs, link.MaxDiagBytes + 1, fmt.Sprint("got ", link.MaxDiagBytes+1)}} {
		if _, err := r.Request(context.Background(), "ch", "a", c.kind, c.bytes); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %d: %v", c.kind, c.bytes, err)
		}
	}
	if r.Waiting() != 0 {
		t.Fatalf("%d waiting", r.Waiting())
	}
}

// Many requests and answers at once (go test -race): each caller gets
// its own answer, from its own peer.
func TestConcurrentRequests(t *testing.T) {
	type req struct {
		peer string
		d    *link.Diag
	}
	q := make(chan req, 256)
	r := New(Options{Send: func(_, peer string, f link.Frame) bool { q <- req{peer, f.(*link.Diag)}; return true }, MaxPerPeer: 8})
	go func() {
		for x := range q {
			r.Report("ch", x.peer, &link.DiagResult{RequestID: x.d.RequestID, Kind: x.d.Kind, Text: x.peer + " " + x.d.RequestID})
		}
	}()
	defer close(q)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			peer := fmt.Sprint("p", i%8)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for {
				res, err := r.Request(ctx, "ch", peer, link.DiagLogs, 1)
				if errors.Is(err, ErrTooMany) {
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil || !strings.HasPrefix(res.Text, peer+" diag-") {
					t.Errorf("%s: %v %v", peer, res, err)
				}
				return
			}
		}()
	}
	wg.Wait()
	if r.Waiting() != 0 {
		t.Fatalf("%d waiting", r.Waiting())
	}
}
