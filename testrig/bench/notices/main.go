// Command notices measures termserver's notice mailboxes (issue 13):
//
//  1. broadcast: -devices simulated devices connect listing "notice" and
//     ack every notice as soon as it arrives; one broadcast notice to all
//     of them; reported: the time from the POST to each device's ack
//     (p50, p99, max), the time until the server counted every ack, and
//     the server's RSS.
//  2. offline: -per notices pending for each of -devices peers that never
//     connect (created as -per broadcasts with a peers list); reported:
//     the disk the workspace's notices/ use, and the server's start-up
//     time (exec until /healthz answers) after a clean stop (snapshot) and
//     after kill -9 (snapshot plus log replay).
//
// It runs a termserver binary (-termserver; built from this tree when
// empty) on a free loopback port with a temporary workspace:
//
//	go run ./testrig/bench/notices -devices 5000 -per 100
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
)

func main() {
	bin := flag.String("termserver", "", "termserver binary (default: go build ./cmd/termserver)")
	devices := flag.Int("devices", 5000, "simulated devices")
	per := flag.Int("per", 100, "pending notices per offline device (part 2)")
	par := flag.Int("parallel", 100, "connects in flight at once")
	part := flag.String("part", "both", "broadcast, offline or both")
	flag.Parse()
	tmp, err := os.MkdirTemp("", "notice-bench")
	check(err)
	defer os.RemoveAll(tmp)
	if *bin == "" {
		*bin = filepath.Join(tmp, "termserver")
		out, err := exec.Command("go", "build", "-o", *bin, "./cmd/termserver").CombinedOutput()
		if err != nil {
			fail("building termserver: %v\n%s", err, out)
		}
	}
	fmt.Printf("load %s", loadavg())
	if *part != "offline" {
		broadcast(*bin, tmp, *devices, *par)
	}
	if *part != "broadcast" {
		offline(*bin, tmp, *devices, *per)
	}
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return string(b)
}

func check(err error) {
	if err != nil {
		fail("%v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "notices bench: "+format+"\n", args...)
	os.Exit(1)
}

type server struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

// start runs termserver on workspace ws and returns once /healthz answers.
func start(bin, dir, ws string) (*server, time.Duration) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	addr := ln.Addr().String()
	ln.Close()
	cfg := filepath.Join(dir, "cfg.json")
	check(os.WriteFile(cfg, fmt.Appendf(nil, `{"workspace": %q,
	  "channels": {"terminal-dev": {"kind": "terminal", "mode": "websocket", "accountId": "local", "agent": "echo"}}}`, ws), 0o600))
	t0 := time.Now()
	cmd := exec.Command(bin, "--config", cfg, "--listen", addr)
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	check(err)
	cmd.Stderr = logf
	check(cmd.Start())
	s := &server{cmd: cmd, addr: addr, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(s.done) }()
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s, time.Since(t0)
			}
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			fail("termserver exited:\n%s", log)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (s *server) stop(sig syscall.Signal) {
	_ = s.cmd.Process.Signal(sig)
	<-s.done
}

func (s *server) rssMiB() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	check(err)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			var kb float64
			fmt.Sscan(f[1], &kb)
			return kb / 1024
		}
	}
	return 0
}

func (s *server) post(path, body string) map[string]any {
	resp, err := http.Post("http://"+s.addr+path, "application/json", strings.NewReader(body))
	check(err)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		fail("POST %s: HTTP %d %s", path, resp.StatusCode, data)
	}
	var out map[string]any
	check(json.Unmarshal(data, &out))
	return out
}

// broadcast is part 1.
func broadcast(bin, tmp string, n, par int) {
	dir := filepath.Join(tmp, "broadcast")
	check(os.MkdirAll(dir, 0o755))
	s, _ := start(bin, dir, filepath.Join(dir, "ws"))
	defer s.stop(syscall.SIGTERM)
	var (
		mu     sync.Mutex
		acked  []time.Time
		posted time.Time
		wg     sync.WaitGroup
		conns  = make([]*websocket.Conn, n)
		sem    = make(chan struct{}, par)
	)
	dialer := &websocket.Dialer{HandshakeTimeout: 30 * time.Second}
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var ws *websocket.Conn
			var err error
			for try := 0; try < 5; try++ {
				if ws, _, err = dialer.Dial("ws://"+s.addr+"/api/channels/terminal-dev/ws", nil); err == nil {
					break
				}
				time.Sleep(time.Duration(try+1) * 100 * time.Millisecond)
			}
			check(err)
			conns[i] = ws
			check(ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Connect{
				PeerID: fmt.Sprintf("kiosk-%05d", i), Capabilities: []string{link.CapText, link.CapNotice},
				Tags: map[string]string{"site": "bench"}})))
			_, data, err := ws.ReadMessage()
			check(err)
			if f, err := link.Decode(data); err != nil || f.FrameType() != link.TypeConnected {
				fail("connect: %s", data)
			}
		}()
	}
	wg.Wait()
	rssConnected := s.rssMiB()
	var readers sync.WaitGroup
	for _, ws := range conns {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				_, data, err := ws.ReadMessage()
				if err != nil {
					return
				}
				f, err := link.Decode(data)
				if err != nil {
					continue
				}
				if nf, ok := f.(*link.Notice); ok {
					_ = ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.NoticeAck{NoticeID: nf.NoticeID}))
					now := time.Now()
					mu.Lock()
					acked = append(acked, now)
					mu.Unlock()
					return
				}
			}
		}()
	}
	posted = time.Now()
	out := s.post("/api/channels/terminal-dev/notices", `{"text":"Fire drill at 3 pm: please leave by the main doors","priority":"alert","tags":{"site":"bench"}}`)
	answered := time.Since(posted)
	readers.Wait()
	// The server has counted every ack once none is pending.
	for {
		var list struct {
			Notices []json.RawMessage `json:"notices"`
		}
		resp, err := http.Get("http://" + s.addr + "/api/channels/terminal-dev/notices")
		check(err)
		check(json.NewDecoder(resp.Body).Decode(&list))
		resp.Body.Close()
		if len(list.Notices) == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	serverAll := time.Since(posted)
	rss := s.rssMiB()
	lat := make([]time.Duration, len(acked))
	for i, a := range acked {
		lat[i] = a.Sub(posted)
	}
	slices.Sort(lat)
	fmt.Printf("broadcast: %d devices (targets %v, online %v), POST answered in %s\n", n, out["targets"], out["online"], answered.Round(time.Microsecond))
	fmt.Printf("broadcast: device acks after the POST: p50 %s p99 %s max %s; server counted all acks after %s\n",
		pct(lat, 50), pct(lat, 99), lat[len(lat)-1].Round(time.Microsecond), serverAll.Round(time.Microsecond))
	fmt.Printf("broadcast: server RSS %.1f MiB with %d devices connected, %.1f MiB after the broadcast\n", rssConnected, n, rss)
	for _, ws := range conns {
		ws.Close()
	}
}

func pct(d []time.Duration, p int) time.Duration {
	return d[(len(d)-1)*p/100].Round(time.Microsecond)
}

// offline is part 2.
func offline(bin, tmp string, n, per int) {
	dir := filepath.Join(tmp, "offline")
	check(os.MkdirAll(dir, 0o755))
	ws := filepath.Join(dir, "ws")
	s, cold := start(bin, dir, ws)
	var peers bytes.Buffer
	for i := range n {
		if i > 0 {
			peers.WriteByte(',')
		}
		fmt.Fprintf(&peers, `"kiosk-%05d"`, i)
	}
	t0 := time.Now()
	for i := range per {
		out := s.post("/api/channels/terminal-dev/notices",
			fmt.Sprintf(`{"text":"Offline notice %d of %d: the shop opens late tomorrow","peers":[%s]}`, i+1, per, peers.String()))
		if out["targets"].(float64) != float64(n) {
			fail("broadcast %d: %v", i, out)
		}
	}
	created := time.Since(t0)
	rss := s.rssMiB()
	fmt.Printf("offline: %d notices for each of %d peers (%d broadcasts) created in %s; server RSS %.1f MiB; empty start-up %s\n",
		per, n, per, created.Round(time.Millisecond), rss, cold.Round(time.Millisecond))
	s.stop(syscall.SIGKILL)
	fmt.Printf("offline: after kill -9: notices/ uses %s\n", du(filepath.Join(ws, "notices")))
	s, replay := start(bin, dir, ws)
	rss = s.rssMiB()
	s.stop(syscall.SIGTERM)
	fmt.Printf("offline: start-up after kill -9 (log replay; the snapshot follows in the background) %s, RSS %.1f MiB; %s\n", replay.Round(time.Millisecond), rss, openedLine(dir))
	fmt.Printf("offline: after a clean stop: notices/ uses %s\n", du(filepath.Join(ws, "notices")))
	s, clean := start(bin, dir, ws)
	s.stop(syscall.SIGTERM)
	fmt.Printf("offline: start-up from the snapshot %s; %s\n", clean.Round(time.Millisecond), openedLine(dir))
}

// du is the disk the files under dir use (allocated blocks).
func du(dir string) string {
	var total int64
	var files []string
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				total += st.Blocks * 512
			}
			files = append(files, fmt.Sprintf("%s %.1f MiB", strings.TrimPrefix(p, dir+"/"), float64(fi.Size())/(1<<20)))
		}
		return nil
	})
	return fmt.Sprintf("%.1f MiB on disk (%s)", float64(total)/(1<<20), strings.Join(files, ", "))
}

// openedLine is what the server logged about opening the mailboxes.
func openedLine(dir string) string {
	log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
	for _, l := range strings.Split(string(log), "\n") {
		if i := strings.Index(l, "notice mailboxes opened"); i >= 0 {
			return "server log: " + l[i:]
		}
	}
	return "no notice log line"
}
