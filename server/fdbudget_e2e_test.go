package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/testrig/load"
)

// TestFDLimitManyDevices runs the termserver binary with RLIMIT_NOFILE
// 1024 (soft and hard, so Go cannot raise it) and 740 devices that send
// one message each, as the report of issue 22 did: every device connects,
// every message is answered, and the server logs no error. Before the
// descriptor budget, 240-470 messages were refused with "recording
// message ...: too many open files": the session store cached up to
// 4,096 open files (and created every new session's file at once) beside
// sockets capped only at the limit less 256. With a terminal agent (a
// process per message), runs wait for their agent's descriptors instead
// of failing with "cannot start the agent" (420 of 740 before Reserve).
func TestFDLimitManyDevices(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts 740 connections against a real server")
	}
	t.Run("builtin", func(t *testing.T) { testFDLimit(t, map[string]any{"builtin": "echo"}) })
	t.Run("terminal_agent", func(t *testing.T) {
		testFDLimit(t, map[string]any{"terminal": map[string]any{
			"enabled": true, "command": echoAgent(t), "timeout": 60, "protocol": "rich"}})
	})
}

func testFDLimit(t *testing.T, agent map[string]any) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to set the child's limit:", err)
	}
	bin := buildAgent(t, "termlink/cmd/termserver")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "termserver.json")
	conf := map[string]any{
		"listen":    "127.0.0.1:0",
		"workspace": filepath.Join(dir, "ws"),
		"channels": map[string]any{"terminal-dev": map[string]any{
			"enabled": true, "kind": "terminal", "mode": "websocket", "accountId": "local", "agent": "echo",
		}},
		"agents": map[string]any{"echo": agent},
	}
	data, _ := json.Marshal(conf)
	if err := os.WriteFile(cfg, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// ulimit -n sets the soft and the hard limit.
	cmd := exec.CommandContext(ctx, sh, "-c", `ulimit -n 1024 && exec "$0" --config "$1"`, bin, cfg)
	cmd.WaitDelay = 5 * time.Second
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logMu sync.Mutex
	var logText strings.Builder
	addrc := make(chan string, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		re := regexp.MustCompile(`termserver listening"? addr=(\S+)`)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			logText.WriteString(line + "\n")
			logMu.Unlock()
			if m := re.FindStringSubmatch(line); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	serverLog := func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return logText.String()
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		<-readDone
	}
	defer stop()
	var addr string
	select {
	case addr = <-addrc:
	case <-time.After(30 * time.Second):
		t.Fatalf("termserver did not start:\n%s", serverLog())
	}

	rep, err := load.Run(ctx, load.Options{
		URL:            "ws://" + addr + "/api/channels/terminal-dev/ws",
		Devices:        740,
		Rate:           740, // one message a device in one second
		Duration:       time.Second,
		Drain:          30 * time.Second,
		ConnectTimeout: 20 * time.Second,
		Logger:         quietLog(),
	})
	if err != nil {
		t.Fatal(err)
	}
	stop()
	out := serverLog()
	var problems []string
	if rep.DevicesConnected != 740 {
		problems = append(problems, fmt.Sprintf("%d of 740 devices connected (%v)", rep.DevicesConnected, rep.ConnectErrors))
	}
	// The generator sends on a schedule and sends fewer on a busy machine
	// (the ones due when sending ends are not sent: 707 of 740 once, under
	// make test beside other engineers' builds); what is asserted of the
	// server is that every one it sent is answered. Half of them still
	// puts hundreds of runs (and agent processes) against the limit.
	t.Logf("at nofile 1024: %d devices, %d messages sent, %d answered", rep.DevicesConnected, rep.Sent, rep.Replied)
	if rep.Sent < 370 || rep.Replied != rep.Sent || rep.Lost != 0 || rep.Rejected != 0 || rep.ErrorFrames != 0 {
		problems = append(problems, fmt.Sprintf("sent %d, replied %d, lost %d, rejected %d, error frames %d %v",
			rep.Sent, rep.Replied, rep.Lost, rep.Rejected, rep.ErrorFrames, rep.ErrorTexts))
	}
	if n := rep.FinishReasons["error"]; n > 0 {
		problems = append(problems, fmt.Sprintf("%d replies are errors (finish reasons %v)", n, rep.FinishReasons))
	}
	if n := strings.Count(out, "too many open files"); n > 0 {
		problems = append(problems, fmt.Sprintf("%d log lines say too many open files", n))
	}
	if n := strings.Count(out, "level=ERROR"); n > 0 {
		problems = append(problems, fmt.Sprintf("%d ERROR lines in the server log", n))
	}
	if !strings.Contains(out, "file descriptor budget") || !strings.Contains(out, "limit=1024") {
		problems = append(problems, "the server did not log its budget under limit 1024")
	}
	if len(problems) > 0 {
		if len(out) > 4000 {
			out = out[:4000] + "..."
		}
		t.Fatalf("at nofile 1024 with 740 devices:\n  %s\nserver log:\n%s", strings.Join(problems, "\n  "), out)
	}
}
