// Command acpbench measures the ACP runner (server/agent/acp) against the
// scripted ACP agent (testrig/agents/acpagent):
//
//	acpbench latency -agent BIN [-n 500] [-rounds 5]
//	    per-turn latency of the runner (Run: session/prompt, the chunks,
//	    the answer) and of a direct JSON-RPC round trip to the same agent
//	    (one session/prompt line written, lines read to its response), in
//	    alternating rounds; prints p50/p99 of each round and the medians,
//	    and the runner's added latency (median p50 and p99 differences).
//	acpbench rss -server URL -pid PID [-sessions 100]
//	    connects that many devices (peer ids acpbench-N) to a running
//	    termserver whose terminal-dev channel uses an ACP agent, sends one
//	    message each so that each session has its live agent process, and
//	    prints the server's VmRSS before and after.
//
// testrig/bench/acp.sh runs both.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/agent/acp"
	"termlink/server/config"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: acpbench latency|rss [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "latency":
		err = latency(os.Args[2:])
	case "rss":
		err = rss(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "acpbench:", err)
		os.Exit(1)
	}
}

func latency(args []string) error {
	fs := flag.NewFlagSet("latency", flag.ExitOnError)
	bin := fs.String("agent", "", "the acpagent binary")
	n := fs.Int("n", 500, "turns per round")
	rounds := fs.Int("rounds", 5, "rounds of each (alternating)")
	fs.Parse(args)
	if *bin == "" {
		return errors.New("-agent is required")
	}
	ctx := context.Background()
	r, err := acp.New("bench", config.ACPAgent{Command: *bin, Args: []string{"--protocol", "1"}},
		acp.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer r.Close()
	req := agent.Request{ChannelID: "bench", SessionKey: "bench", MessageID: "m", Text: "hi", Workspace: os.TempDir()}
	if res := r.Run(ctx, req, nil); res.Text != "You said: hi" {
		return fmt.Errorf("runner warm-up answered %+v", res)
	}
	d, err := startDirect(*bin)
	if err != nil {
		return err
	}
	defer d.close()
	var runP50, runP99, dirP50, dirP99 []time.Duration
	for round := range *rounds {
		lat := make([]time.Duration, 0, *n)
		for range *n {
			t0 := time.Now()
			if err := d.prompt("hi"); err != nil {
				return err
			}
			lat = append(lat, time.Since(t0))
		}
		p50, p99 := pct(lat)
		dirP50, dirP99 = append(dirP50, p50), append(dirP99, p99)
		fmt.Printf("round %d direct: p50 %s p99 %s\n", round, p50, p99)
		lat = lat[:0]
		for range *n {
			t0 := time.Now()
			if res := r.Run(ctx, req, func(string) {}); res.FinishReason != "stop" {
				return fmt.Errorf("runner answered %+v", res)
			}
			lat = append(lat, time.Since(t0))
		}
		p50, p99 = pct(lat)
		runP50, runP99 = append(runP50, p50), append(runP99, p99)
		fmt.Printf("round %d runner: p50 %s p99 %s\n", round, p50, p99)
	}
	m := func(v []time.Duration) time.Duration { slices.Sort(v); return v[len(v)/2] }
	dp50, dp99, rp50, rp99 := m(dirP50), m(dirP99), m(runP50), m(runP99)
	fmt.Printf("median of %d rounds x %d turns: direct p50 %s p99 %s; runner p50 %s p99 %s; added p50 %s p99 %s\n",
		*rounds, *n, dp50, dp99, rp50, rp99, rp50-dp50, rp99-dp99)
	return nil
}

func pct(v []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)*50/100], s[min(len(s)-1, len(s)*99/100)]
}

// direct is the agent spoken to with bare JSON-RPC lines.
type direct struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Reader
	id      int
	session string
}

func startDirect(bin string) (*direct, error) {
	cmd := exec.Command(bin)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &direct{cmd: cmd, in: in, out: bufio.NewReaderSize(outPipe, 1<<16)}
	if _, err := d.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}}); err != nil {
		return nil, err
	}
	res, err := d.call("session/new", map[string]any{"cwd": os.TempDir(), "mcpServers": []any{}})
	if err != nil {
		return nil, err
	}
	var s struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(res, &s); err != nil {
		return nil, err
	}
	d.session = s.SessionID
	return d, nil
}

// call writes one request and reads lines until its response.
func (d *direct) call(method string, params any) (json.RawMessage, error) {
	d.id++
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": d.id, "method": method, "params": params})
	if _, err := d.in.Write(append(b, '\n')); err != nil {
		return nil, err
	}
	want := strconv.Itoa(d.id)
	for {
		line, err := d.out.ReadBytes('\n')
		if err != nil {
			return nil, err
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(line, &m); err != nil {
			return nil, err
		}
		if m.Method == "" && string(m.ID) == want {
			if m.Error != nil {
				return nil, fmt.Errorf("%s: %s", method, m.Error)
			}
			return m.Result, nil
		}
	}
}

func (d *direct) prompt(text string) error {
	_, err := d.call("session/prompt", map[string]any{"sessionId": d.session, "prompt": []any{map[string]any{"type": "text", "text": text}}})
	return err
}

func (d *direct) close() {
	d.in.Close()
	d.cmd.Wait()
}

func rss(args []string) error {
	fs := flag.NewFlagSet("rss", flag.ExitOnError)
	url := fs.String("server", "", "the terminal-dev WebSocket URL")
	pid := fs.Int("pid", 0, "the server's process id")
	sessions := fs.Int("sessions", 100, "devices, each a session with a live agent")
	fs.Parse(args)
	if *url == "" || *pid == 0 {
		return errors.New("-server and -pid are required")
	}
	base, err := vmRSS(*pid)
	if err != nil {
		return err
	}
	conns := make([]*websocket.Conn, 0, *sessions)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range *sessions {
		c, _, err := websocket.DefaultDialer.Dial(*url, nil)
		if err != nil {
			return fmt.Errorf("device %d: %w", i, err)
		}
		conns = append(conns, c)
		peer := fmt.Sprintf("acpbench-%d", i)
		if err := exchange(c, &link.Connect{PeerID: peer, DeviceName: peer, Capabilities: []string{link.CapText}}, func(f link.Frame) bool {
			_, ok := f.(*link.Connected)
			return ok
		}); err != nil {
			return fmt.Errorf("device %d connect: %w", i, err)
		}
		if err := exchange(c, &link.Message{MessageID: "m1", Text: "hello"}, func(f link.Frame) bool {
			m, ok := f.(*link.Message)
			if ok && !strings.HasPrefix(m.Text, "You said: ") {
				fmt.Fprintf(os.Stderr, "device %d: reply %q\n", i, m.Text)
			}
			return ok
		}); err != nil {
			return fmt.Errorf("device %d message: %w", i, err)
		}
	}
	time.Sleep(2 * time.Second)
	after, err := vmRSS(*pid)
	if err != nil {
		return err
	}
	fmt.Printf("sessions=%d server_rss_start=%dKiB server_rss_with_sessions=%dKiB per_session=%dKiB\n",
		*sessions, base, after, (after-base)/int64(*sessions))
	return nil
}

// exchange sends f and reads frames until done says so.
func exchange(c *websocket.Conn, f link.Frame, done func(link.Frame) bool) error {
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := c.WriteMessage(websocket.TextMessage, link.MustEncode(f)); err != nil {
		return err
	}
	for {
		_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
		_, data, err := c.ReadMessage()
		if err != nil {
			return err
		}
		g, err := link.Decode(data)
		if err != nil {
			return err
		}
		if done(g) {
			return nil
		}
	}
}

func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, errors.New("no VmRSS")
}
