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
	"termlink/server/throttle"
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
	log := slog.New(slog.NewTextHandler(logs, nil))
	gate := throttle.New(log, throttle.Options{Burst: 100, Every: time.Hour})
	t.Cleanup(gate.Close)
	return New(Options{Send: s.send, MaxPerPeer: maxPeer, MaxTotal: maxTotal, Log: log, Outside: gate}), s, logs
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

// A device is believed only about what it was asked (issue 36): a
// result of another peer, for nobody, of another kind or too late is
// refused (an error saying so, a log line) and leaves the request
// waiting; the request ends with its context.
func TestResultRefused(t *testing.T) {
	r, s, logs := newRequests(t, 0, 0)
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := r.Request(ctx, "ch", "kiosk-1", link.DiagSelftest, 0)
		errc <- err
	}()
	d := <-s.next
	noRequest := "names no request waiting for this device's answer (it came too late, or answers nothing asked)"
	for _, c := range []struct {
		channel, peer string
		f             link.Frame
		want          string
	}{
		{"ch", "kiosk-2", &link.DiagResult{RequestID: d.RequestID, Kind: link.DiagSelftest, OK: true}, noRequest},
		{"other", "kiosk-1", &link.DiagResult{RequestID: d.RequestID, Kind: link.DiagSelftest, OK: true}, noRequest},
		{"ch", "kiosk-1", &link.DiagResult{RequestID: "diag-unknown", Kind: link.DiagSelftest}, `request_id "diag-unknown" ` + noRequest},
		{"ch", "kiosk-1", &link.DiagResult{RequestID: d.RequestID, Kind: link.DiagLogs, Text: "log"}, "asked for selftest, not \"logs\""},
		{"ch", "kiosk-1", &link.SettingsAck{Version: 1}, "diag requests take diag_result frames, not settings_ack"},
	} {
		believed, err := r.Report(c.channel, c.peer, c.f)
		if believed || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("Report(%s, %s, %+v) = %v, %v; want refused with %q", c.channel, c.peer, c.f, believed, err, c.want)
		}
	}
	if r.Waiting() != 1 {
		t.Fatalf("waiting %d", r.Waiting())
	}
	gone := errors.New("the operator went away")
	cancel(gone)
	if err := <-errc; !errors.Is(err, gone) {
		t.Fatalf("Request = %v, want the context's cause", err)
	}
	// Too late now.
	if _, err := r.Report("ch", "kiosk-1", &link.DiagResult{RequestID: d.RequestID, Kind: link.DiagSelftest}); err == nil || !strings.Contains(err.Error(), noRequest) {
		t.Fatalf("a result too late: %v", err)
	}
	l := logs.String()
	if strings.Count(l, "diag result refused") != 5 || !strings.Contains(l, "asked for selftest") || r.Waiting() != 0 {
		t.Fatalf("waiting %d, log:\n%s", r.Waiting(), l)
	}
}

// A flood of results nobody asked for writes the gate's burst of lines,
// each field cut, and a summary (issue 36 row 1: one unsolicited result
// was a line of the whole result).
func TestResultRefusalsThrottled(t *testing.T) {
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	gate := throttle.New(log, throttle.Options{Burst: 2, Every: time.Hour, MaxField: 64})
	r := New(Options{Send: (&sent{}).send, Log: log, Outside: gate})
	id := strings.Repeat("q", link.MaxFleetIDBytes)
	for i := range 1000 {
		if _, err := r.Report("ch", "kiosk-1", &link.DiagResult{RequestID: fmt.Sprint(i) + id[3:], Kind: link.DiagLogs}); err == nil {
			t.Fatal("an unsolicited result taken")
		}
	}
	gate.Close() // writes the summary
	l := logs.String()
	if n := strings.Count(l, "msg=\"diag result refused\""); n != 2 {
		t.Fatalf("%d lines of refused results, want the gate's burst of 2:\n%s", n, l)
	}
	if !strings.Contains(l, "summary") || !strings.Contains(l, "998") || strings.Contains(l, id[:65]) {
		t.Fatalf("no summary of the 998 held back, or a field not cut:\n%s", l)
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
