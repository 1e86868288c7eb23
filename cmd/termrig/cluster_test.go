package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"termlink/internal/syncbuf"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/testrig/cluster"
)

func TestClusterFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"cluster", "--nodes", "0"},
		{"cluster", "--edges", "-1"},
		{"cluster", "--replicas", "-1"},
		{"cluster", "--partitions", "x"},
		{"cluster", "extra"},
		{"cluster", "--debug-addr", "0.0.0.0:6061"}, // not loopback: refused before anything starts
		{"cluster", "--debug-addr", "nonsense"},
	} {
		code, _, stderr := runTermrig(t, args...)
		if code != 2 || !strings.Contains(stderr, "termrig cluster:") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and the error", args, code, stderr)
		}
	}
	if code, stdout, _ := runTermrig(t, "cluster", "-h"); code != 0 || !strings.Contains(stdout, "-nats URLs") {
		t.Errorf("cluster -h: exit %d, stdout %q", code, stdout)
	}
}

// rigProc is a `termrig cluster` process and the lines it printed.
type rigProc struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	mu     sync.Mutex
	lines  []string
	ready  chan struct{}
	done   chan struct{}
}

func startRig(t *testing.T, bin string, args ...string) *rigProc {
	t.Helper()
	r := &rigProc{stderr: &syncbuf.Buffer{}, ready: make(chan struct{}), done: make(chan struct{})}
	r.cmd = exec.Command(bin, append([]string{"cluster"}, args...)...)
	r.cmd.Stderr = r.stderr
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.mu.Lock()
			r.lines = append(r.lines, sc.Text())
			r.mu.Unlock()
			if sc.Text() == "ready" {
				close(r.ready)
			}
		}
		_ = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.done
	})
	select {
	case <-r.ready:
	case <-r.done:
		t.Fatalf("termrig cluster exited before ready: %v; stdout %q; stderr:\n%s", r.cmd.ProcessState, r.printed(), r.stderr.String())
	case <-time.After(testwait.Deadline):
		t.Fatalf("termrig cluster printed no ready line in %v; stdout %q; stderr:\n%s", testwait.Deadline, r.printed(), r.stderr.String())
	}
	return r
}

func (r *rigProc) printed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

// interrupt sends SIGINT (Ctrl-C) and waits for exit status 0.
func (r *rigProc) interrupt(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.done:
	case <-time.After(testwait.Deadline):
		t.Fatalf("termrig cluster did not exit within %v of SIGINT; stderr:\n%s", testwait.Deadline, r.stderr.String())
	}
	if !r.cmd.ProcessState.Success() {
		t.Fatalf("termrig cluster after SIGINT: %v, want exit 0; stderr:\n%s", r.cmd.ProcessState, r.stderr.String())
	}
}

var (
	natsLineRE   = regexp.MustCompile(`^nats    (n\d+) (nats://127\.0\.0\.1:\d+)$`)
	edgeLineRE   = regexp.MustCompile(`^edge    (edge-\d+) (http://127\.0\.0\.1:\d+) (ws://127\.0\.0\.1:\d+/api/channels/terminal-dev/ws)$`)
	workerLineRE = regexp.MustCompile(`^worker  (worker-\d+) (http://127\.0\.0\.1:\d+)$`)
)

// rigLines checks every printed line against the contract and returns
// the NATS URLs and the nodes' HTTP URLs by name.
func rigLines(t *testing.T, lines []string, nats, edges, workers int) (natsURLs []string, httpURLs map[string]string) {
	t.Helper()
	httpURLs = map[string]string{}
	var kinds []string
	for _, l := range lines {
		switch m := []([]string){natsLineRE.FindStringSubmatch(l), edgeLineRE.FindStringSubmatch(l), workerLineRE.FindStringSubmatch(l)}; {
		case m[0] != nil:
			natsURLs = append(natsURLs, m[0][2])
			kinds = append(kinds, "nats")
		case m[1] != nil:
			httpURLs[m[1][1]] = m[1][2]
			if strings.TrimPrefix(m[1][3], "ws://") != strings.TrimPrefix(m[1][2], "http://")+"/api/channels/terminal-dev/ws" {
				t.Errorf("edge line %q: the ws URL is not on the http URL's address", l)
			}
			kinds = append(kinds, "edge")
		case m[2] != nil:
			httpURLs[m[2][1]] = m[2][2]
			kinds = append(kinds, "worker")
		case l == "ready":
			kinds = append(kinds, "ready")
		default:
			t.Errorf("line %q is not in the contract's format", l)
		}
	}
	var want []string
	for range nats {
		want = append(want, "nats")
	}
	for range edges {
		want = append(want, "edge")
	}
	for range workers {
		want = append(want, "worker")
	}
	want = append(want, "ready")
	if !slices.Equal(kinds, want) {
		t.Errorf("printed %q: kinds %v, want %v", lines, kinds, want)
	}
	return natsURLs, httpURLs
}

// buildTermrig builds this command (not race-instrumented: the rig runs
// three NATS nodes and four servers on two cores), once for the tests
// of this package.
func buildTermrig(t *testing.T) string {
	t.Helper()
	termrigBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "termrig-test-")
		if err != nil {
			termrigBin.err = err
			return
		}
		termrigBin.dir, termrigBin.path = dir, filepath.Join(dir, "termrig")
		if out, err := exec.Command("go", "build", "-o", termrigBin.path, "termlink/cmd/termrig").CombinedOutput(); err != nil {
			termrigBin.err = fmt.Errorf("building termrig: %v\n%s", err, out)
		}
	})
	if termrigBin.err != nil {
		t.Fatal(termrigBin.err)
	}
	return termrigBin.path
}

var termrigBin struct {
	once      sync.Once
	dir, path string
	err       error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if termrigBin.dir != "" {
		os.RemoveAll(termrigBin.dir)
	}
	os.Exit(code)
}

func hostPort(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.Host
}

func portClosed(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

// termrig cluster as a real process: the printed lines follow the
// contract, every NATS node answers JetStream requests, every node's
// /api/status lists the whole cluster, and SIGINT stops everything
// (exit 0, every port closed, the temporary directory removed).
func TestClusterRig(t *testing.T) {
	t.Parallel()
	const edges, workers = 2, 2
	bin := buildTermrig(t)
	r := startRig(t, bin, "--nodes", "3", "--edges", "2", "--workers", "2")
	natsURLs, httpURLs := rigLines(t, r.printed(), 3, edges, workers)
	m := regexp.MustCompile(`node files and logs in (\S+)`).FindStringSubmatch(r.stderr.String())
	if m == nil {
		t.Fatalf("stderr says not where the files are: %q", r.stderr.String())
	}
	dir := m[1]
	var addrs []string
	for _, u := range natsURLs {
		addrs = append(addrs, hostPort(t, u))
		nc, err := nats.Connect(u, nats.MaxReconnects(0))
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := js.AccountInfo(ctx); err != nil {
			t.Errorf("%s: JetStream account info: %v", u, err)
		}
		cancel()
		nc.Close()
	}
	for name, u := range httpURLs {
		addrs = append(addrs, hostPort(t, u))
		checkClusterStatus(t, name, u, edges+workers)
	}
	// A message through each edge is answered (by a worker).
	for _, l := range r.printed() {
		if m := edgeLineRE.FindStringSubmatch(l); m != nil {
			if got := rigRoundTrip(t, m[3], "rig-"+m[1], "hello "+m[1]); got != "You said: hello "+m[1] {
				t.Errorf("through %s: reply %q", m[1], got)
			}
		}
	}
	r.interrupt(t)
	for _, a := range addrs {
		if !portClosed(a) {
			t.Errorf("%s still accepts connections after termrig cluster exited", a)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("temporary directory %s not removed at exit (stat: %v)", dir, err)
	}
}

// rigRoundTrip sends one message as peer with raw frames and returns the
// reply's text.
func rigRoundTrip(t *testing.T, wsURL, peer, text string) string {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(wsURL, nil)
	if err != nil {
		t.Fatalf("%s: %v", wsURL, err)
	}
	defer ws.Close()
	_ = ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	for _, f := range []link.Frame{&link.Connect{PeerID: peer}, &link.Message{MessageID: "m-1", Text: text}} {
		if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(f)); err != nil {
			t.Fatal(err)
		}
	}
	_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("%s: no reply: %v", wsURL, err)
		}
		if f, err := link.Decode(data); err == nil {
			if m, ok := f.(*link.Message); ok && m.MessageID == "m-1" {
				return m.Text
			}
		}
	}
}

// checkClusterStatus checks that GET /api/status on node name has a
// cluster object listing nodes termserver nodes.
func checkClusterStatus(t *testing.T, name, base string, nodes int) {
	t.Helper()
	resp, err := http.Get(base + "/api/status")
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	defer resp.Body.Close()
	var st struct {
		Cluster *struct {
			Name  string `json:"name"`
			Nodes []struct {
				Name string `json:"name"`
				Role string `json:"role"`
				URL  string `json:"url"`
			} `json:"nodes"`
		} `json:"cluster"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("%s /api/status: %v", name, err)
	}
	if st.Cluster == nil || st.Cluster.Name != name || len(st.Cluster.Nodes) != nodes {
		t.Errorf("%s /api/status cluster = %+v, want %s with %d nodes", name, st.Cluster, name, nodes)
	}
}

// --nats: against an external JetStream server (here one nats-server
// process, so --replicas 1) no NATS node is started and no nats line
// printed; the edge answers through the worker.
func TestClusterRigExternalNATS(t *testing.T) {
	t.Parallel()
	ext := cluster.StartNATSForTest(t, 1)
	bin := buildTermrig(t)
	dir := t.TempDir()
	r := startRig(t, bin, "--nats", ext.URLs(), "--edges", "1", "--workers", "1", "--dir", dir, "--partitions", "4", "--replicas", "1")
	_, httpURLs := rigLines(t, r.printed(), 0, 1, 1)
	for name, u := range httpURLs {
		checkClusterStatus(t, name, u, 2)
	}
	for _, l := range r.printed() {
		if m := edgeLineRE.FindStringSubmatch(l); m != nil {
			if got := rigRoundTrip(t, m[3], "ext-1", "hi"); got != "You said: hi" {
				t.Errorf("reply %q", got)
			}
		}
	}
	r.interrupt(t)
	if _, err := os.Stat(filepath.Join(dir, "edge-1", "termserver.log")); err != nil {
		t.Errorf("--dir %s not kept: %v", dir, err)
	}
	// The external cluster is still there.
	if err := ext.WaitReady(context.Background()); err != nil {
		t.Error(err)
	}
}
