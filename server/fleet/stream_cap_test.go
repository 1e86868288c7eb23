package fleet

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"

	"termlink/internal/testwait"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/httpapi"
)

// asOperator serves the API's routes as the operator X-Test-Operator
// names (the guard's part in the server).
func asOperator(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, httpapi.WithOperator(r, httpapi.Operator{Name: r.Header.Get("X-Test-Operator"), Role: config.RoleViewer}))
	})
}

func openStream(t *testing.T, url, op string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/api/channels/dev/events/stream", nil)
	req.Header.Set("X-Test-Operator", op)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// One admin token holds at most MaxStreamsPerToken live streams: the next
// is refused with 429 and says why, while another token still opens one
// (the server-wide cap is not reached); a stream closed frees its place.
func TestEventStreamsPerToken(t *testing.T) {
	e := newEnv(t, Options{MaxStreamsPerToken: 2, MaxStreams: 10})
	srv := httptest.NewServer(asOperator(e.mux))
	t.Cleanup(srv.Close)
	t.Cleanup(e.api.StopStreams) // before srv.Close: it waits for the streams
	var held []*http.Response
	for i := range 2 {
		resp := openStream(t, srv.URL, "vera")
		if resp.StatusCode != 200 {
			t.Fatalf("vera's stream %d: %d", i, resp.StatusCode)
		}
		held = append(held, resp)
	}
	resp := openStream(t, srv.URL, "vera")
	if resp.StatusCode == 200 {
		t.Fatal("vera's third stream opened past her token's cap")
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(body), `too many live event streams for admin token \"vera\": it holds 2, the most one token may`) {
		t.Fatalf("vera's third stream: %d %s", resp.StatusCode, body)
	}
	if resp := openStream(t, srv.URL, "otto"); resp.StatusCode != 200 {
		t.Fatalf("otto's stream while vera holds her cap: %d", resp.StatusCode)
	}
	held[0].Body.Close()
	testwait.Until(t, "vera's closed stream to end", func() bool { return e.api.StreamsOpen() == 2 })
	if resp := openStream(t, srv.URL, "vera"); resp.StatusCode != 200 {
		t.Fatalf("vera's stream after closing one: %d", resp.StatusCode)
	}
}

// syncLog is a log the test reads while the server writes it.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A stream whose client stops reading is dropped when a write makes no
// progress for StreamWrite, long before its subscription lags (its
// buffer is far larger than what the test sends), and the drop is
// counted and said.
func TestEventStreamNotReadingDropped(t *testing.T) {
	logs := &syncLog{}
	e := newEnv(t, Options{StreamWrite: 20e6, StreamBuffer: 50000})
	e.api.d.Log = slog.New(slog.NewTextHandler(logs, nil))
	srv := httptest.NewServer(asOperator(e.mux))
	t.Cleanup(srv.Close)
	t.Cleanup(e.api.StopStreams)
	// A client with a tiny receive buffer that never reads.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.DialContext(context.Background(), "tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /api/channels/dev/events/stream HTTP/1.1\r\nHost: %s\r\nX-Test-Operator: vera\r\n\r\n", srv.Listener.Addr())
	testwait.Until(t, "the stream to open", func() bool { return e.api.StreamsOpen() == 1 })
	detail := strings.Repeat("d", 1000)
	dropped := func() bool {
		var m bytes.Buffer
		e.metrics.WriteText(&m)
		return strings.Contains(m.String(), `termserver_event_streams_dropped_total{channel="dev"} 1`+"\n")
	}
	added := 0
	testwait.Until(t, "the stream that does not read to be dropped", func() bool {
		for range 200 { // events until the socket's buffers are full and a write waits
			e.events.Add(events.Event{Event: "e", Detail: detail})
		}
		added += 200
		// Open first, then the counter: the handler counts the drop
		// before the stream closes, so a stream seen closed with no drop
		// counted after it was not dropped. (Read the other way round, a
		// drop between the two reads looked like none: make test, once.)
		if open := e.api.StreamsOpen() == 1; dropped() || open {
			return dropped()
		}
		// Ended without a drop counted: say so now, not after the wait's
		// deadline (a make test under load waited 2 min once here).
		t.Fatalf("the stream ended without being counted as dropped, after %d events; log:\n%s", added, logs.String())
		return false
	})
	// Said after it is counted, before the stream ends.
	testwait.Until(t, "the dropped stream to end", func() bool { return e.api.StreamsOpen() == 0 })
	if !strings.Contains(logs.String(), "event stream client stopped reading") {
		t.Errorf("the drop was not said, or said as a lag:\n%s", logs.String())
	}
	_ = bufio.NewReader(conn) // never read
}
