package httpserve

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"termlink/internal/syncbuf"
	"termlink/internal/testpki"
)

// handshakeLines counts the log lines about failed TLS handshakes:
// lines for one failure each, summary lines, and the failures they
// account for in all.
func handshakeLines(log string) (single, summaries, failures int) {
	countRE := regexp.MustCompile(` count=(\d+)`)
	for _, l := range strings.Split(log, "\n") {
		switch {
		case strings.Contains(l, `msg="TLS handshake failed (summary)"`):
			summaries++
			if m := countRE.FindStringSubmatch(l); m != nil {
				n, _ := strconv.Atoi(m[1])
				failures += n
			}
		case strings.Contains(l, `msg="TLS handshake failed"`), strings.Contains(l, "TLS handshake error from"):
			single++
			failures++
		}
	}
	return
}

// TestTLSHandshakeFailuresAggregated opens 300 TCP connections to a TLS
// server and closes each before a handshake (as a scanner or a flood of
// half-open connections does). Each one is a failed handshake; the log
// gets one line for the first and then summaries with counts, not a line
// each (before: 300 WARN lines).
func TestTLSHandshakeFailuresAggregated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	leaf := testpki.NewCA(t, dir, "server").Server(t, "server")
	cert, err := tls.LoadX509KeyPair(leaf.CertFile, leaf.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	lim := DefaultLimits
	lim.ErrorEvery = 500 * time.Millisecond
	hs := New(http.NotFoundHandler(), lim, log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = hs.Shutdown(t.Context())
			<-done
		}
	}
	defer stop()

	const n = 300
	began := time.Now()
	for range n {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	// Wait until the log accounts for every failure (the last summary
	// comes at most ErrorEvery after the last failure).
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, _, failures := handshakeLines(logs.String())
		if failures >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(began)
	single, summaries, failures := handshakeLines(logs.String())
	// One line at once, then at most a summary per ErrorEvery (and a
	// line at once again after a quiet ErrorEvery, which cannot happen
	// more often).
	maxLines := 2 + 2*int(elapsed/lim.ErrorEvery)
	if failures != n || single+summaries > maxLines || single < 1 {
		t.Fatalf("%d failed handshakes in %v: %d single lines, %d summaries accounting for %d (want all %d in at most %d lines)\n%s",
			n, elapsed.Round(time.Millisecond), single, summaries, failures, n, maxLines, logs.String())
	}

	// A failure counted and not yet summarised is logged at shutdown
	// (or, after a quiet span, at once).
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	time.Sleep(50 * time.Millisecond) // let the server read the EOF; if it has not, the failure is logged after Close
	stop()
	deadline = time.Now().Add(10 * time.Second)
	for {
		_, _, f := handshakeLines(logs.String())
		if f == n+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after one more failure and shutdown the log accounts for %d failures, want %d\n%s", f, n+1, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHTTPErrorLogKinds: each kind is counted on its own; other lines
// pass through; nothing is logged after Close.
func TestHTTPErrorLogKinds(t *testing.T) {
	t.Parallel()
	logs := &syncbuf.Buffer{}
	el := NewErrorLog(slog.New(slog.NewTextHandler(logs, nil)), time.Hour)
	for i := range 1000 {
		el.Write([]byte("http: TLS handshake error from 10.0.0.1:" + strconv.Itoa(i) + ": EOF\n"))
	}
	for range 50 {
		el.Write([]byte("http: Accept error: accept tcp 127.0.0.1:8080: accept4: too many open files; retrying in 5ms\n"))
	}
	el.Write([]byte("http: superfluous response.WriteHeader call\n"))
	before := logs.String()
	if got := strings.Count(before, "\n"); got != 3 {
		t.Fatalf("%d lines before Close, want 3 (first of each kind, the other line):\n%s", got, before)
	}
	if !strings.Contains(before, "10.0.0.1:0: EOF") || !strings.Contains(before, "superfluous") {
		t.Fatalf("first failure or other line missing:\n%s", before)
	}
	el.Close()
	after := strings.TrimPrefix(logs.String(), before)
	if !strings.Contains(after, `msg="TLS handshake failed (summary)" count=999`) || !strings.Contains(after, "10.0.0.1:999: EOF") ||
		!strings.Contains(after, `msg="accepting a connection failed (summary)" count=49`) {
		t.Fatalf("summaries at Close:\n%s", after)
	}
	el.Write([]byte("http: TLS handshake error from 10.0.0.2:1: EOF\n"))
	el.Close()
	if got := strings.TrimPrefix(logs.String(), before+after); strings.Count(got, "\n") > 1 {
		t.Fatalf("after Close: %s", got)
	}
}
