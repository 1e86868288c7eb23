package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Channel is the terminal channel every node serves.
const Channel = "terminal-dev"

// Agent is the agent a node's channel runs.
type Agent struct {
	// Command is a Terminal Protocol v1 command (run with /bin/sh -c in
	// the workspace). Empty: the built-in echo agent.
	Command string
	// Protocol is "rich" or "plain" (empty: the server's default).
	Protocol string
	// TimeoutSeconds bounds one run (0: the server's default).
	TimeoutSeconds int
}

// NodeSpec describes one termserver node of a cluster.
type NodeSpec struct {
	Name       string // unique, e.g. edge-1
	Role       string // edge, worker or all
	NATS       string // comma-separated NATS URLs
	Partitions int    // 0: the server's default
	Replicas   int    // 0: the server's default
	Agent      Agent
	// Cluster holds more keys of the cluster block (ackWaitSeconds,
	// leaseSeconds, duplicateWindowSeconds, dedupeHours, credentials,
	// tls), as they go in the JSON.
	Cluster map[string]any
	// ChannelConfig holds keys of the channel's config block (tokens,
	// enrollment), as they go in the JSON.
	ChannelConfig map[string]any
	// Releases holds keys of the releases block (maxBytes, maxReleases),
	// as they go in the JSON (nil: none).
	Releases map[string]any
	// Dir holds the node's config, workspace and log (required).
	Dir string
	// Host is the address it listens on (default 127.0.0.1) and Netns
	// the network namespace it runs in (ip netns exec; "": this one's).
	Host, Netns string
}

// ConfigJSON returns the node's termserver config (listen Host:0,
// workspace Dir/workspace, channel terminal-dev with the agent, the
// cluster block).
func (s NodeSpec) ConfigJSON() ([]byte, error) {
	if s.Name == "" || s.Role == "" || s.NATS == "" || s.Dir == "" {
		return nil, fmt.Errorf("node spec %q: name, role, nats and dir are required", s.Name)
	}
	agent := map[string]any{"builtin": "echo"}
	if s.Agent.Command != "" {
		t := map[string]any{"enabled": true, "command": s.Agent.Command}
		if s.Agent.Protocol != "" {
			t["protocol"] = s.Agent.Protocol
		}
		if s.Agent.TimeoutSeconds > 0 {
			t["timeout"] = s.Agent.TimeoutSeconds
		}
		agent = map[string]any{"terminal": t}
	}
	cl := map[string]any{"nats": s.NATS, "role": s.Role, "name": s.Name}
	if s.Partitions > 0 {
		cl["partitions"] = s.Partitions
	}
	if s.Replicas > 0 {
		cl["replicas"] = s.Replicas
	}
	for k, v := range s.Cluster {
		cl[k] = v
	}
	ch := map[string]any{"kind": "terminal", "mode": "websocket", "accountId": "local", "agent": "agent"}
	if len(s.ChannelConfig) > 0 {
		ch["config"] = s.ChannelConfig
	}
	host := s.Host
	if host == "" {
		host = "127.0.0.1"
	}
	cfg := map[string]any{
		"listen":    net.JoinHostPort(host, "0"),
		"workspace": filepath.Join(s.Dir, "workspace"),
		"channels":  map[string]any{Channel: ch},
		"agents":    map[string]any{"agent": agent},
		"cluster":   cl,
	}
	if len(s.Releases) > 0 {
		cfg["releases"] = s.Releases
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// WriteConfig writes the node's config to Dir/termserver.json and
// returns its path.
func (s NodeSpec) WriteConfig() (string, error) {
	b, err := s.ConfigJSON()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return "", fmt.Errorf("node %s: %w", s.Name, err)
	}
	path := filepath.Join(s.Dir, "termserver.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", fmt.Errorf("node %s: writing config: %w", s.Name, err)
	}
	return path, nil
}

// Server is a termserver node running as a process.
type Server struct {
	Spec       NodeSpec
	Binary     string
	ConfigFile string
	LogFile    string

	mu   sync.Mutex
	addr string // host:port it listens on; kept across restarts
	p    *proc
}

// StartServer writes the node's config and runs binary (termserver)
// with it, and waits (bounded by ctx and 60 s) until it listens and
// answers GET /healthz.
func StartServer(ctx context.Context, binary string, spec NodeSpec) (*Server, error) {
	cfg, err := spec.WriteConfig()
	if err != nil {
		return nil, err
	}
	s := &Server{Spec: spec, Binary: binary, ConfigFile: cfg, LogFile: filepath.Join(spec.Dir, "termserver.log")}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Addr is the host:port the node listens on.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// HTTPURL is the node's HTTP base URL.
func (s *Server) HTTPURL() string { return "http://" + s.Addr() }

// WSURL is the URL of the node's device WebSocket.
func (s *Server) WSURL() string { return "ws://" + s.Addr() + "/api/channels/" + Channel + "/ws" }

var listeningRE = regexp.MustCompile(`termserver listening"? addr=(\S+)`)

// Start runs the node (again: with the address it had, retried for 10 s
// while that port is taken) and waits until it answers /healthz.
func (s *Server) Start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		err := s.startOnce(ctx)
		if err == nil || !addrInUse(err) || s.Addr() == "" {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *Server) startOnce(ctx context.Context) error {
	s.mu.Lock()
	if s.p != nil && !s.p.exited() {
		s.mu.Unlock()
		return fmt.Errorf("termserver %s: already running", s.Spec.Name)
	}
	args := inNetns(s.Spec.Netns, s.Binary, "--config", s.ConfigFile, "--shutdown-grace", "2s")
	if s.addr != "" {
		args = append(args, "--listen", s.addr)
	}
	var off int64
	if st, err := os.Stat(s.LogFile); err == nil {
		off = st.Size()
	}
	p, err := startProc(s.LogFile, nil, args...)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("termserver %s: %w", s.Spec.Name, err)
	}
	s.p = p
	s.mu.Unlock()
	addr, err := s.waitListening(ctx, p, off)
	if err == nil {
		s.mu.Lock()
		s.addr = addr
		s.mu.Unlock()
		err = s.waitHealthy(ctx, p, addr)
	}
	if err != nil {
		p.kill()
		p.killGroup()
		return err
	}
	return nil
}

// waitListening reads the log (from offset off: this run's lines) until
// the "termserver listening" line gives the address.
func (s *Server) waitListening(ctx context.Context, p *proc, off int64) (string, error) {
	for {
		if addr, ok := findListening(s.LogFile, off); ok {
			return addr, nil
		}
		if p.exited() {
			tail := logTail(s.LogFile, 20)
			err := fmt.Errorf("termserver %s exited before it listened (%v); log:\n%s", s.Spec.Name, p.err, tail)
			if strings.Contains(tail, "address already in use") {
				err = fmt.Errorf("%w: %w", errAddrInUse, err)
			}
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("termserver %s printed no \"termserver listening\" line: %w; log:\n%s", s.Spec.Name, ctx.Err(), logTail(s.LogFile, 20))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func findListening(file string, off int64) (string, bool) {
	f, err := os.Open(file)
	if err != nil {
		return "", false
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return "", false
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
			return m[1], true
		}
	}
	return "", false
}

func (s *Server) waitHealthy(ctx context.Context, p *proc, addr string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		if p.exited() {
			return fmt.Errorf("termserver %s exited (%v); log:\n%s", s.Spec.Name, p.err, logTail(s.LogFile, 20))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("termserver %s: GET /healthz: %v (%w); log:\n%s", s.Spec.Name, last, ctx.Err(), logTail(s.LogFile, 20))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Kill ends the node with SIGKILL and waits until it is gone.
func (s *Server) Kill() {
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// Stop sends SIGTERM and waits for the exit (killed after a grace
// period or when ctx ends).
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.stop(ctx); err != nil {
		return fmt.Errorf("termserver %s: %w", s.Spec.Name, err)
	}
	return nil
}

// Restart stops the node (SIGTERM) and starts it again on its address.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Stop(ctx); err != nil {
		return err
	}
	return s.Start(ctx)
}

// Running reports whether the node's process is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p != nil && !s.p.exited()
}

// Close stops the node and anything its process group left behind. A
// data race the node reported (a termserver built with -race) is an
// error, with the report.
func (s *Server) Close(ctx context.Context) error {
	err := s.Stop(ctx)
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	if p != nil {
		p.killGroup()
	}
	if b, rerr := os.ReadFile(s.LogFile); rerr == nil {
		if i := strings.Index(string(b), "WARNING: DATA RACE"); i >= 0 {
			report := string(b[i:])
			if len(report) > 8000 {
				report = report[:8000]
			}
			err = errors.Join(err, fmt.Errorf("termserver %s reported a data race:\n%s", s.Spec.Name, report))
		}
	}
	return err
}

// LogTail returns the last n lines of the node's log.
func (s *Server) LogTail(n int) string { return logTail(s.LogFile, n) }

// ExportSessions runs `termserver --config CONFIG export-sessions dir`
// with the node's config: the cluster's session history as nanobot
// JSONL files in dir.
func (s *Server) ExportSessions(ctx context.Context, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, s.Binary, "--config", s.ConfigFile, "export-sessions", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("termserver %s export-sessions: %w\n%s", s.Spec.Name, err, out)
	}
	return nil
}
