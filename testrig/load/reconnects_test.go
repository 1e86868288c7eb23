package load

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/internal/testwait"
)

// The reasons link.Client gives for a failed dial (link's
// describeDialError, with the bodies of termserver's refusals) sort into
// the refusal classes the storm bench counts.
func TestRefusalClass(t *testing.T) {
	for _, tt := range []struct{ reason, want string }{
		{"dial: server answered HTTP 503 Service Unavailable: server busy: it holds its maximum of 754 WebSocket connections (maxConnections); try again later", RefusedMaxConns},
		{"dial: server answered HTTP 503 Service Unavailable: server at its connection limit (file descriptors): try again later", RefusedGuard},
		{"dial: server answered HTTP 503 Service Unavailable: channel terminal-dev is stopping", RefusedHTTP},
		{"dial: server answered HTTP 401 Unauthorized: unauthorized", RefusedHTTP},
		{"dial: the server refused the TLS handshake: remote error: tls: bad certificate", RefusedTLS},
		{"dial: server certificate signed by an unknown authority (check --ca-file)", RefusedTLS},
		{"dial: dial tcp 127.0.0.1:4431: connect: connection refused", RefusedConnect},
		{"dial: read tcp 127.0.0.1:50312->127.0.0.1:4431: read: connection reset by peer", RefusedReset},
		{"dial: EOF", RefusedReset},
		{"dial: unexpected EOF", RefusedReset},
		{"dial: no answer within the connect timeout (context deadline exceeded)", RefusedTimeout},
		{"dial: dial tcp 127.0.0.1:4431: i/o timeout", RefusedTimeout},
		{"server error registry_full: too many devices", RefusedOther},
	} {
		if got := RefusalClass(tt.reason); got != tt.want {
			t.Errorf("RefusalClass(%q) = %q, want %q", tt.reason, got, tt.want)
		}
	}
}

// eventLog collects the reconnect log's lines as Run writes them.
type eventLog struct {
	mu     sync.Mutex
	events []ReconnectEvent
	bad    []string
}

func (l *eventLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var e ReconnectEvent
	if err := json.Unmarshal(b, &e); err != nil || !strings.HasSuffix(string(b), "\n") {
		l.bad = append(l.bad, string(b)) // one Write is one whole line
	} else {
		l.events = append(l.events, e)
	}
	return len(b), nil
}

// devices counts the distinct devices with an event of kind (and class,
// when not empty).
func (l *eventLog) devices(kind, class string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[int]bool{}
	for _, e := range l.events {
		if e.Event == kind && (class == "" || e.Class == class) {
			seen[e.Device] = true
		}
	}
	return len(seen)
}

// Hold-mode link.Clients ride out a real server's restart: the
// reconnect log has, per device, its link lost, the attempts (dial)
// refused while the server was down (class "refused") and the link back,
// in order and with rising times; the report counts the refusals by class.
func TestReconnectLogAcrossRestart(t *testing.T) {
	noLeaks(t)
	const n = 4
	workspace := t.TempDir()
	first, err := startRealServer(workspace, "127.0.0.1:0", realOptions{})
	if err != nil {
		t.Fatal(err)
	}
	log := &eventLog{}
	status := &lineWriter{lines: make(chan string, 4)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		rep *Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := Run(ctx, Options{URL: first.URL, Devices: n, Hold: true, Client: true, PeerPrefix: "storm",
			Reconnects: log, Status: status, Logger: slog.New(slog.DiscardHandler)})
		done <- result{rep, err}
	}()
	select {
	case <-status.lines:
	case <-time.After(testwait.Deadline):
		t.Fatal("no status line in hold mode")
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	// Down until every device has met a refused dial.
	testwait.Until(t, "every device refused once while the server is down", func() bool {
		return log.devices(ReconnectFailed, RefusedConnect) == n
	})
	second, err := startRealServer(workspace, first.Addr, realOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := second.stop(); err != nil {
			t.Errorf("Serve after the restart: %v", err)
		}
	}()
	testwait.Until(t, "every device back", func() bool { return log.devices(ReconnectUp, "") == n })
	cancel()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}

	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.bad) > 0 {
		t.Errorf("lines that are not one JSON event each: %q", log.bad)
	}
	per := map[int][]ReconnectEvent{}
	for _, e := range log.events {
		per[e.Device] = append(per[e.Device], e)
	}
	for dev := range n {
		evs := per[dev]
		if len(evs) < 5 || len(evs)%2 == 0 || evs[0].Event != ReconnectDown || evs[len(evs)-1].Event != ReconnectUp {
			t.Errorf("device %d: events %+v, want down, (dial, failed)..., dial, up", dev, evs)
			continue
		}
		for i, e := range evs {
			if i > 0 && e.At < evs[i-1].At {
				t.Errorf("device %d: event %d at %d before the one before it (%d)", dev, i, e.At, evs[i-1].At)
			}
			switch {
			case i == 0 || i == len(evs)-1:
			case i%2 == 1 && e.Event != ReconnectDial:
				t.Errorf("device %d: event %d %+v, want the start of an attempt (dial)", dev, i, e)
			case i%2 == 0 && (e.Event != ReconnectFailed || e.Class == "" || e.Reason == ""):
				t.Errorf("device %d: event %d %+v, want a failed attempt with its class and reason", dev, i, e)
			}
		}
		if evs[0].Reason == "" {
			t.Errorf("device %d: down without a reason", dev)
		}
	}
	rep := res.rep
	if rep.ReconnectFailures[RefusedConnect] < n || rep.Reconnects != n || rep.ReconnectLogError != "" {
		t.Errorf("report: failures %v reconnects %d log error %q, want at least %d refused and %d reconnects",
			rep.ReconnectFailures, rep.Reconnects, rep.ReconnectLogError, n, n)
	}
}

// With CAFile, lean and client devices trust a wss:// server whose
// certificate that file holds; without it they are refused (unknown
// authority), and a file with no certificate is an option error.
func TestRunCAFile(t *testing.T) {
	p := &peer{}
	srv := httptest.NewTLSServer(p)
	t.Cleanup(func() {
		srv.Close()
		waitZero(t, &p.active)
	})
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, client := range []bool{false, true} {
		rep := run(t, Options{URL: srv.URL, Devices: 2, Rate: 20, Duration: 200 * time.Millisecond, Drain: drainAll,
			Client: client, CAFile: ca})
		if rep.DevicesConnected != 2 || rep.Replied != rep.Sent || rep.Sent == 0 {
			t.Errorf("client %v with the CA: connected %d sent %d replied %d", client, rep.DevicesConnected, rep.Sent, rep.Replied)
		}
		rep = run(t, Options{URL: srv.URL, Devices: 1, Rate: 0, Duration: time.Millisecond, Client: client})
		if rep.DevicesFailed != 1 || len(rep.ConnectErrors) == 0 || RefusalClass(rep.ConnectErrors[0].Text) != RefusedTLS {
			t.Errorf("client %v without the CA: failed %d errors %+v, want a TLS failure", client, rep.DevicesFailed, rep.ConnectErrors)
		}
	}
	empty := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(empty, []byte("nothing"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), Options{URL: srv.URL, Devices: 1, Rate: 0, Duration: time.Millisecond, CAFile: empty})
	if err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Errorf("empty CA file: err %v", err)
	}
	_, err = Run(context.Background(), Options{URL: srv.URL, Devices: 1, Rate: 0, Duration: time.Millisecond, Reconnects: &eventLog{}})
	if err == nil || !strings.Contains(err.Error(), "set Client") {
		t.Errorf("reconnect log in lean mode: err %v", err)
	}
}
