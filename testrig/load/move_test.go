package load

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

// startTwo serves two independent real termservers (loopback, free
// ports) whose echo agent answers after delay.
func startTwo(t *testing.T, delay time.Duration) (a, b *realServer) {
	t.Helper()
	var rs [2]*realServer
	for i := range rs {
		s, err := startRealServer(t.TempDir(), "127.0.0.1:0", realOptions{echoDelay: delay})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.stop(); err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
		rs[i] = s
	}
	return rs[0], rs[1]
}

// checkSpread fails t unless the report lists the servers in order with
// the devices spread round-robin and all connected after the connect
// phase and at the end.
func checkSpread(t *testing.T, rep *Report, urls []string, devices int) {
	t.Helper()
	if len(rep.Servers) != len(urls) {
		t.Fatalf("report lists %d servers, want %d: %+v", len(rep.Servers), len(urls), rep.Servers)
	}
	atEnd := 0
	for i, s := range rep.Servers {
		want := devices / len(urls)
		if i < devices%len(urls) {
			want++
		}
		if s.URL != urls[i] || s.Devices != want || s.Connected != want {
			t.Errorf("server %d: %+v, want %s with %d devices, all connected", i, s, urls[i], want)
		}
		atEnd += s.ConnectedAtEnd
	}
	if atEnd != devices {
		t.Errorf("%d devices connected at the end, want %d: %+v", atEnd, devices, rep.Servers)
	}
}

// Several servers without moves: device i on server i mod n, each server
// sees its share of the devices, every message answered once.
func TestSeveralServers(t *testing.T) {
	a, b := startTwo(t, 0)
	urls := []string{a.URL, b.URL}
	rep := runClean(t, Options{URLs: []string{a.URL + "," + b.URL}, Devices: 7, Rate: 100,
		Duration: 500 * time.Millisecond, Drain: drainAll, PeerPrefix: "spread"})
	checkAllAnswered(t, rep, 7)
	checkSpread(t, rep, urls, 7)
	if got, want := rep.URL, a.URL+","+b.URL; got != want {
		t.Errorf("report URL %q, want %q", got, want)
	}
	if a.accepts.Load() != 4 || b.accepts.Load() != 3 {
		t.Errorf("servers accepted %d and %d connections, want 4 and 3", a.accepts.Load(), b.accepts.Load())
	}
	if rep.Moves != 0 || rep.Resent != 0 {
		t.Errorf("moves %d resent %d without --move", rep.Moves, rep.Resent)
	}
}

// Lean devices hop between two real servers while messages are in flight
// (the echo agent answers after 150ms): every device moves, no move fails,
// the messages cut off by a move are resent on the next server and every
// message is answered. The two servers do not share sessions, so a
// resent message runs again there; a duplicate reply is possible and not
// checked here.
func TestMoveLean(t *testing.T) {
	a, b := startTwo(t, 150*time.Millisecond)
	const devices, moveEvery = 8, 400 * time.Millisecond
	rep := runClean(t, Options{URLs: []string{a.URL, b.URL}, Devices: devices, Rate: 16,
		Duration: 2 * time.Second, Drain: drainAll, Move: moveEvery, PeerPrefix: "hop"})
	if rep.DevicesConnected != devices || rep.Sent == 0 || rep.Replied != rep.Sent || rep.Lost != 0 || rep.UnknownIDs != 0 {
		t.Errorf("connected %d sent %d replied %d lost %d unknown %d, want all %d connected and every message answered",
			rep.DevicesConnected, rep.Sent, rep.Replied, rep.Lost, rep.UnknownIDs, devices)
	}
	if rep.Moves < devices || rep.MovesFailed != 0 || rep.Disconnected != 0 {
		t.Errorf("moves %d failed %d (%v) disconnected %d, want every device moved and none failed",
			rep.Moves, rep.MovesFailed, rep.MoveErrors, rep.Disconnected)
	}
	if rep.Resent == 0 {
		t.Errorf("no message resent after a move, though replies take 150ms and devices move every 400ms")
	}
	// A move resends each message its device has unanswered: a message
	// is written again once per move that cut it off, so once at most
	// while round trips are shorter than the move period. On a busy
	// machine a round trip can outlast several moves of its device (a
	// period apart; the ceiling allows for a move that came late) and
	// the message is resent after each: Resent counts those writes (it
	// once exceeded Sent under make test's race step, round trips up to
	// 1.8 s: the test was wrong to bound it by Sent).
	cuts := int64(math.Ceil(rep.RoundTrip.Max/float64(moveEvery/time.Millisecond))) + 1
	if rep.Resent > rep.Sent*cuts {
		t.Errorf("resent %d times for %d messages, round trips up to %.0fms: a message is resent only when a move cut it off, at most %d times",
			rep.Resent, rep.Sent, rep.RoundTrip.Max, cuts)
	}
	checkSpread(t, rep, []string{a.URL, b.URL}, devices)
	// Each move is one more connection, on one server or the other.
	if got := a.accepts.Load() + b.accepts.Load(); got != int64(devices+rep.Moves) {
		t.Errorf("servers accepted %d connections, want %d devices + %d moves", got, devices, rep.Moves)
	}
	if a.accepts.Load() <= devices/2 || b.accepts.Load() <= devices/2 {
		t.Errorf("servers accepted %d and %d connections: the moves did not reach both", a.accepts.Load(), b.accepts.Load())
	}
	var text strings.Builder
	rep.WriteText(&text)
	for _, want := range []string{"servers       2, devices spread round-robin", "server 1      4 devices  connected 4", "moves         every 400ms: moves "} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
}

// Client-mode devices hop between two real servers: each move closes the
// link.Client and starts a new one on the next server with the same
// outbox, which resends what is unanswered. The clients deliver each
// reply once.
func TestMoveClient(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // the file outboxes' state dirs
	for _, outbox := range []string{OutboxMemory, OutboxFile} {
		t.Run(outbox, func(t *testing.T) {
			a, b := startTwo(t, 150*time.Millisecond)
			const devices = 6
			rep := runClean(t, Options{URLs: []string{a.URL, b.URL}, Devices: devices, Rate: 12,
				Duration: 2 * time.Second, Drain: drainAll, Move: 500 * time.Millisecond,
				Client: true, Outbox: outbox, PeerPrefix: "hopc"})
			checkAllAnswered(t, rep, devices)
			if rep.Moves < devices || rep.MovesFailed != 0 || rep.Disconnected != 0 || rep.Reconnects != 0 {
				t.Errorf("moves %d failed %d (%v) disconnected %d reconnects %d, want every device moved, none failed",
					rep.Moves, rep.MovesFailed, rep.MoveErrors, rep.Disconnected, rep.Reconnects)
			}
			// A new client sends what the old one left unanswered: more
			// frames than messages.
			if c := rep.Client; c == nil || c.Sessions != int64(devices+rep.Moves) || c.FramesSent <= rep.Sent {
				t.Errorf("client stats %+v, want %d sessions (devices + moves) and more frames than the %d messages",
					c, devices+rep.Moves, rep.Sent)
			}
			checkSpread(t, rep, []string{a.URL, b.URL}, devices)
			if got := a.accepts.Load() + b.accepts.Load(); got != int64(devices+rep.Moves) {
				t.Errorf("servers accepted %d connections, want %d devices + %d moves", got, devices, rep.Moves)
			}
		})
	}
}

// A move to a server that is down fails and is counted; the device comes
// back at its next move, to the next server.
func TestMoveToServerDown(t *testing.T) {
	a := startReal(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "ws://" + ln.Addr().String() + "/api/channels/terminal-dev/ws"
	ln.Close() // nothing listens there now
	rep := runClean(t, Options{URLs: []string{a.URL, dead}, Devices: 4, Rate: 20,
		Duration: 1500 * time.Millisecond, Drain: 5 * time.Second, Move: 300 * time.Millisecond,
		ConnectTimeout: 2 * time.Second, PeerPrefix: "down"})
	if rep.DevicesConnected != 2 || rep.DevicesFailed != 2 {
		t.Errorf("connected %d failed %d, want the 2 devices of the live server connected", rep.DevicesConnected, rep.DevicesFailed)
	}
	if rep.Moves == 0 || rep.MovesFailed == 0 || rep.MovesFailed > rep.Moves {
		t.Errorf("moves %d failed %d, want moves to the dead server to fail", rep.Moves, rep.MovesFailed)
	}
	if len(rep.MoveErrors) == 0 || !strings.Contains(rep.MoveErrors[0].Text, "dial") {
		t.Errorf("move errors %v, want the dial error", rep.MoveErrors)
	}
	// Failed moves alternate with moves back to the live server.
	if a.accepts.Load() <= 2 {
		t.Errorf("live server accepted %d connections: no device came back after a failed move", a.accepts.Load())
	}
	if rep.Disconnected != 0 {
		t.Errorf("disconnected %d: a move is not a disconnect", rep.Disconnected)
	}
}

// The moves are spread evenly: device i first moves at move*(i+1)/n,
// then every move.
func TestMoveOffset(t *testing.T) {
	const n = 4
	move := 8 * time.Second
	want := []time.Duration{2 * time.Second, 4 * time.Second, 6 * time.Second, 8 * time.Second, 10 * time.Second}
	for k, w := range want {
		if got := moveOffset(move, n, int64(k)); got != w {
			t.Errorf("move %d (device %d) at %v, want %v", k, k%n, got, w)
		}
	}
}

func TestSeveralServersOptionErrors(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
		want string
	}{
		{"empty URL in the list", Options{URLs: []string{"ws://a", "", "ws://c"}}, "server URL 2 of 3 is empty"},
		{"empty URL after a comma", Options{URLs: []string{"ws://a,"}}, "server URL 2 of 2 is empty"},
		{"bad scheme in the list", Options{URLs: []string{"ws://a", "ftp://b"}}, `server URL "ftp://b": scheme must be ws, wss, http or https`},
		{"URL and URLs", Options{URL: "ws://a", URLs: []string{"ws://b"}}, "not both"},
		{"move with one server", Options{URL: "ws://a", Move: time.Second}, "give at least two server URLs, got 1"},
		{"move with one server in URLs", Options{URLs: []string{"ws://a"}, Move: time.Second}, "give at least two server URLs, got 1"},
		{"negative move", Options{URLs: []string{"ws://a", "ws://b"}, Move: -time.Second}, "move must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opt.Devices, tt.opt.Duration = 1, time.Second
			rep, err := Run(context.Background(), tt.opt)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run error = %v, want %q", err, tt.want)
			}
			if rep != nil {
				t.Errorf("Run returned a report with an error")
			}
		})
	}
	// A URL without a path gets the channel path, in a list as alone.
	urls, err := ChannelURLs([]string{"127.0.0.1:1,http://h:2/", "wss://h:3/x/ws"}, "chan")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ws://127.0.0.1:1/api/channels/chan/ws", "ws://h:2/api/channels/chan/ws", "wss://h:3/x/ws"}
	if strings.Join(urls, " ") != strings.Join(want, " ") {
		t.Errorf("ChannelURLs = %q, want %q", urls, want)
	}
}

// ChannelURLs on any list: no panic; on success one ws:// or wss:// URL
// with a host and a path per comma-separated part; an error that names
// the empty part otherwise.
func FuzzChannelURLs(f *testing.F) {
	for _, s := range []string{"ws://a:1", "a:1,b:2", "ws://a,,ws://b", ",", "http://h/x/ws,https://h2", "ftp://x", "ws://[::1]:8/", " a:1 , b:2 "} {
		f.Add(s, "terminal-dev")
	}
	f.Fuzz(func(t *testing.T, list, channel string) {
		urls, err := ChannelURLs([]string{list}, channel)
		parts := strings.Split(list, ",")
		if err != nil {
			for i, p := range parts {
				if strings.TrimSpace(p) == "" && !strings.Contains(err.Error(), fmt.Sprintf("server URL %d of %d is empty", i+1, len(parts))) {
					t.Errorf("error %q does not name empty part %d of %d", err, i+1, len(parts))
				}
			}
			return
		}
		if len(urls) != len(parts) {
			t.Fatalf("%d URLs from %d parts", len(urls), len(parts))
		}
		for _, u := range urls {
			pu, err := url.Parse(u)
			if err != nil || (pu.Scheme != "ws" && pu.Scheme != "wss") || pu.Host == "" || pu.Path == "" {
				t.Errorf("URL %q: scheme, host or path missing (%v)", u, err)
			}
		}
	})
}
