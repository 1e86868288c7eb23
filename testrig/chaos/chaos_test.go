package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/internal/testwait"
)

// answerWithin bounds a wait for an answer that must come: testwait's
// deadline (a loaded machine is slow, never that slow); refusedWithin a
// wait for one that must not (a reset or a close comes at once).
const (
	answerWithin  = testwait.Deadline
	refusedWithin = 5 * time.Second
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := New(Options{Target: echoServer(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type line struct {
	c net.Conn
	r *bufio.Reader
}

func dialProxy(t *testing.T, p *Proxy) *line {
	t.Helper()
	l, err := tryDial(t, p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// tryDial dials the proxy; a reset can already fail the dial.
func tryDial(t *testing.T, p *Proxy) (*line, error) {
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return &line{c, bufio.NewReader(c)}, nil
}

// refused checks that a new connection through p passes nothing.
func refused(t *testing.T, p *Proxy) bool {
	t.Helper()
	l, err := tryDial(t, p)
	if err != nil {
		return true
	}
	_, err = l.roundTrip("x", refusedWithin)
	return err != nil
}

// roundTrip writes s and reads its echo within limit.
func (l *line) roundTrip(s string, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = l.c.SetDeadline(start.Add(limit))
	if _, err := io.WriteString(l.c, s+"\n"); err != nil {
		return 0, err
	}
	got, err := l.r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if got != s+"\n" {
		return 0, errors.New("echo mismatch: " + got)
	}
	return time.Since(start), nil
}

func TestForwardAndLatency(t *testing.T) {
	p := newProxy(t)
	l := dialProxy(t, p)
	if _, err := l.roundTrip("hello", answerWithin); err != nil {
		t.Fatalf("normal: %v", err)
	}
	p.SetLatency(100 * time.Millisecond)
	took, err := l.roundTrip("slow", answerWithin)
	if err != nil {
		t.Fatal(err)
	}
	// A floor, not a ceiling: the proxy's timers cannot fire early, however
	// busy the machine.
	if took < 200*time.Millisecond { // 100ms each way
		t.Fatalf("round trip with 100ms latency took %v, want >= 200ms", took)
	}
	// A latency no test waits out holds the next line; "normal" releases
	// it and the line after it goes straight through: only a latency left
	// in force could keep either past answerWithin.
	p.SetLatency(time.Hour)
	if _, err := io.WriteString(l.c, "held\n"); err != nil {
		t.Fatal(err)
	}
	_ = l.c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if got, err := l.r.ReadString('\n'); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a line under an hour's latency came back: %q %v", got, err)
	}
	if err := p.Apply(Action{Name: "normal"}); err != nil {
		t.Fatal(err)
	}
	if p.Latency() != 0 || p.Mode() != Normal {
		t.Fatalf("after normal: latency %v, mode %v", p.Latency(), p.Mode())
	}
	_ = l.c.SetReadDeadline(time.Now().Add(answerWithin))
	if got, err := l.r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after normal, the held line: %q %v", got, err)
	}
	if _, err := l.roundTrip("fast", answerWithin); err != nil {
		t.Fatalf("after normal: %v", err)
	}
	want := int64(len("hello\nslow\nheld\nfast\n"))
	// Each direction counts just after its write: the echo of "fast" can
	// be counted down before its way up is (seen once under make test).
	testwait.UntilOK(t, fmt.Sprintf("%d bytes counted each way", want), func() error {
		if st := p.Stats(); st.BytesUp != want || st.BytesDown != want {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	if st := p.Stats(); st.Accepted != 1 || st.Active != 1 || st.BytesUp != want || st.BytesDown != want {
		t.Fatalf("stats %+v", st)
	}
}

func TestStallHoldsBytesThenReleases(t *testing.T) {
	p := newProxy(t)
	l := dialProxy(t, p)
	if _, err := l.roundTrip("before", answerWithin); err != nil {
		t.Fatal(err)
	}
	p.SetMode(Stall)
	if _, err := l.roundTrip("held", 300*time.Millisecond); err == nil {
		t.Fatal("a stalled proxy passed bytes")
	}
	// The socket stays open: no EOF, no reset.
	p.SetMode(Normal)
	_ = l.c.SetDeadline(time.Now().Add(answerWithin))
	got, err := l.r.ReadString('\n')
	if err != nil || got != "held\n" {
		t.Fatalf("after the stall: %q %v", got, err)
	}
	// New connections during a stall are accepted but silent.
	p.SetMode(Stall)
	l2 := dialProxy(t, p)
	if _, err := l2.roundTrip("x", 200*time.Millisecond); err == nil {
		t.Fatal("new connection passed bytes during a stall")
	}
}

func TestRefuseCutDown(t *testing.T) {
	p := newProxy(t)
	l := dialProxy(t, p)
	if _, err := l.roundTrip("a", answerWithin); err != nil {
		t.Fatal(err)
	}
	p.SetMode(Refuse)
	// Open connections are untouched.
	if _, err := l.roundTrip("b", answerWithin); err != nil {
		t.Fatalf("refuse broke an open connection: %v", err)
	}
	// New ones are reset.
	if !refused(t, p) {
		t.Fatal("refuse mode passed a new connection")
	}
	p.SetMode(Normal)
	if n := p.Cut(); n != 1 {
		t.Fatalf("cut %d connections, want 1", n)
	}
	if _, err := l.roundTrip("d", refusedWithin); err == nil {
		t.Fatal("cut connection still works")
	}
	l3 := dialProxy(t, p)
	if _, err := l3.roundTrip("e", answerWithin); err != nil {
		t.Fatalf("new connection after cut: %v", err)
	}
	if err := p.Apply(Action{Name: "down"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l3.roundTrip("f", refusedWithin); err == nil {
		t.Fatal("down left a connection open")
	}
	st := p.Stats()
	if st.Refused < 1 || st.Cut != 2 || st.Accepted != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTargetDown(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	p, err := New(Options{Target: ln.Addr().String()})
	ln.Close() // after New, so the proxy cannot get the same port
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !refused(t, p) {
		t.Fatal("proxy to a closed port passed bytes")
	}
	if p.Stats().Refused != 1 {
		t.Fatalf("stats %+v", p.Stats())
	}
}

func TestParseAction(t *testing.T) {
	tests := []struct {
		in   string
		want Action
		err  string
	}{
		{"cut", Action{Name: "cut"}, ""},
		{" stall ", Action{Name: "stall"}, ""},
		{"latency=250ms", Action{Name: "latency", Latency: 250 * time.Millisecond}, ""},
		{"latency", Action{}, "needs a duration"},
		{"latency=fast", Action{}, "must be a duration"},
		{"cut=1", Action{}, "takes no value"},
		{"explode", Action{}, `unknown action "explode"`},
		{"", Action{}, "empty action"},
	}
	for _, tt := range tests {
		got, err := ParseAction(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseAction(%q) error %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseAction(%q) = %+v, %v", tt.in, got, err)
		}
	}
}

func TestParseSchedule(t *testing.T) {
	s, err := ParseSchedule("5s:cut, 10s:stall,15s:normal,15s:latency=20ms", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []Step{{5 * time.Second, Action{Name: "cut"}}, {10 * time.Second, Action{Name: "stall"}},
		{15 * time.Second, Action{Name: "normal"}}, {15 * time.Second, Action{Name: "latency", Latency: 20 * time.Millisecond}}}
	if len(s.Steps) != len(want) || s.Repeat != 20*time.Second {
		t.Fatalf("got %+v", s)
	}
	for i := range want {
		if s.Steps[i] != want[i] {
			t.Fatalf("step %d = %+v, want %+v", i, s.Steps[i], want[i])
		}
	}
	for in, msg := range map[string]string{
		"":                "empty schedule",
		"5s":              "want OFFSET:ACTION",
		"x:cut":           "must be a duration",
		"5s:cut,2s:stall": "before the previous",
		"5s:boom":         "unknown action",
	} {
		if _, err := ParseSchedule(in, 0); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseSchedule(%q) error %v, want %q", in, err, msg)
		}
	}
	if _, err := ParseSchedule("5s:cut", time.Second); err == nil {
		t.Error("repeat shorter than the schedule accepted")
	}
}

func TestRunScheduleRepeats(t *testing.T) {
	p := newProxy(t)
	sched, err := ParseSchedule("10ms:stall,30ms:normal", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Millisecond)
	defer cancel()
	var mu sync.Mutex
	var seen []string
	err = p.RunSchedule(ctx, sched, func(s Step) {
		mu.Lock()
		seen = append(seen, s.Action.String())
		mu.Unlock()
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RunSchedule: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 6 || seen[0] != "stall" || seen[1] != "normal" || seen[2] != "stall" {
		t.Fatalf("steps %v, want stall,normal repeated", seen)
	}
	// Run once without repeat.
	once, _ := ParseSchedule("0s:refuse", 0)
	if err := p.RunSchedule(context.Background(), once, nil); err != nil || p.Mode() != Refuse {
		t.Fatalf("once: %v, mode %s", err, p.Mode())
	}
}

func TestControlHandler(t *testing.T) {
	p := newProxy(t)
	hs := httptest.NewServer(p.Handler())
	defer hs.Close()
	post := func(path string) (int, Status) {
		resp, err := http.Post(hs.URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st Status
		if resp.StatusCode == 200 {
			if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, st
	}
	if code, st := post("/mode?m=stall"); code != 200 || st.Mode != Stall {
		t.Fatalf("stall: %d %+v", code, st)
	}
	if code, st := post("/mode?m=latency&d=40ms"); code != 200 || st.Mode != Normal || st.Latency != "40ms" {
		t.Fatalf("latency: %d %+v", code, st)
	}
	if code, st := post("/latency?d=0s"); code != 200 || st.Latency != "0s" {
		t.Fatalf("latency 0: %d %+v", code, st)
	}
	l := dialProxy(t, p)
	if _, err := l.roundTrip("x", answerWithin); err != nil {
		t.Fatal(err)
	}
	if code, st := post("/cut"); code != 200 || st.Cut != 1 {
		t.Fatalf("cut: %d %+v", code, st)
	}
	if code, _ := post("/mode?m=bogus"); code != 400 {
		t.Fatalf("bogus mode: HTTP %d", code)
	}
	if code, _ := post("/latency?d=soon"); code != 400 {
		t.Fatalf("bad latency: HTTP %d", code)
	}
	resp, err := http.Get(hs.URL + "/status")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("status: %v", err)
	}
	resp.Body.Close()
}
