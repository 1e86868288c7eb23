package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"termlink/internal/syncbuf"
	"termlink/internal/testwait"
)

func TestChaosFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{}, "--target is required"},
		{[]string{"--target", "nohost"}, `--target "nohost": want host:port`},
		{[]string{"--target", "h:1", "--repeat", "5s"}, "--repeat needs a --schedule"},
		{[]string{"--target", "h:1", "--schedule", "5s:explode"}, `--schedule: step 1 "5s:explode": unknown action "explode"`},
		{[]string{"--target", "h:1", "--schedule", "5s:cut,1s:stall"}, "before the previous step"},
		{[]string{"--target", "h:1", "--schedule", "5s:cut", "--repeat", "1s"}, "shorter than the last offset"},
		{[]string{"--target", "h:1", "--mode", "cut=2"}, "--mode: action \"cut\" takes no value"},
		{[]string{"--target", "h:1", "--latency", "-1s"}, "--latency must not be negative"},
		{[]string{"--target", "h:1", "--latency", "5"}, "must be a duration with a unit"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runTermrig(t, append([]string{"chaos"}, tt.args...)...)
			if code != 2 || !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "termrig chaos -h") || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout, stderr, tt.want)
			}
		})
	}
	if code, stdout, _ := runTermrig(t, "chaos", "-h"); code != 0 || !strings.Contains(stdout, "Usage: termrig chaos --listen ADDR --target ADDR") {
		t.Errorf("chaos -h: exit %d, %q", code, stdout)
	}
}

// tcpEcho echoes lines back.
func tcpEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// termrig chaos as a process would run it: a schedule, the control API,
// Ctrl-C, counters at the end.
func TestChaosRunScheduleAndControl(t *testing.T) {
	target := tcpEcho(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncbuf.Buffer{}
	var errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"chaos", "--listen", "127.0.0.1:0", "--target", target, "--control", "127.0.0.1:0",
			"--schedule", "150ms:stall,300ms:normal"}, out, &errOut)
	}()
	wait := func(re *regexp.Regexp) []string {
		t.Helper()
		var m []string
		testwait.UntilOK(t, fmt.Sprintf("%v in the output", re), func() error {
			if m = re.FindStringSubmatch(out.String()); m == nil {
				return fmt.Errorf("output %q (stderr %q)", out.String(), errOut.String())
			}
			return nil
		})
		return m
	}
	proxy := wait(regexp.MustCompile(`chaos: proxying (\S+) -> `))[1]
	control := wait(regexp.MustCompile(`control API on (http://\S+)`))[1]

	conn, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	echo := func(s string, limit time.Duration) error {
		_ = conn.SetDeadline(time.Now().Add(limit))
		if _, err := io.WriteString(conn, s+"\n"); err != nil {
			return err
		}
		_, err := r.ReadString('\n')
		return err
	}
	if err := echo("through the proxy", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	wait(regexp.MustCompile(`chaos: \S+ stall`))
	wait(regexp.MustCompile(`chaos: \S+ normal`))

	post := func(path string) map[string]any {
		t.Helper()
		resp, err := http.Post(control+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 {
			t.Fatalf("POST %s: HTTP %d %v", path, resp.StatusCode, err)
		}
		return st
	}
	if st := post("/mode?m=stall"); st["mode"] != "stall" {
		t.Fatalf("status %v", st)
	}
	if err := echo("stalled", 200*time.Millisecond); err == nil {
		t.Fatal("bytes passed a stalled proxy")
	}
	if st := post("/cut"); st["cut"] != 1.0 {
		t.Fatalf("status after cut %v", st)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut.String())
		}
	case <-time.After(testwait.Deadline):
		t.Fatal("termrig chaos did not stop")
	}
	if !strings.Contains(out.String(), "chaos: stopped: accepted 1, refused 0, cut 1") {
		t.Fatalf("output %q", out.String())
	}
}
