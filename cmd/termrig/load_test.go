package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// loadReport is the part of the JSON report the several-server tests read.
type loadReport struct {
	URL        string `json:"url"`
	Connected  int    `json:"devices_connected"`
	Sent       int64  `json:"sent"`
	Replied    int64  `json:"replied"`
	Lost       int64  `json:"lost"`
	DupReplies int64  `json:"duplicate_replies"`
	Servers    []struct {
		URL       string `json:"url"`
		Devices   int    `json:"devices"`
		Connected int    `json:"connected"`
	} `json:"servers"`
	Moves       int `json:"moves"`
	MovesFailed int `json:"moves_failed"`
}

// --server given twice, one of them a comma list, URLs without a path
// (the --channel path is filled in), --move: the devices spread over the
// three servers and hop between them, lean and --client.
func TestLoadSeveralServersMove(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // the file outboxes' state dirs
	a, b, c := echoServer(t, false), echoServer(t, false), echoServer(t, false)
	for _, mode := range [][]string{nil, {"--client"}, {"--client", "--outbox", "file"}} {
		t.Run(strings.Join(append([]string{"lean"}, mode...), " "), func(t *testing.T) {
			args := append([]string{"load", "--server", a, "--server", b + "," + c, "--devices", "6", "--rate", "30",
				"--duration", "600ms", "--move", "150ms", "--drain", "5s", "--json"}, mode...)
			code, stdout, stderr := runTermrig(t, args...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %q, stdout %s", code, stderr, stdout)
			}
			var rep loadReport
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatalf("stdout is not a JSON report: %v\n%s", err, stdout)
			}
			if len(rep.Servers) != 3 {
				t.Fatalf("servers %+v, want 3", rep.Servers)
			}
			for i, s := range rep.Servers {
				want := "ws" + strings.TrimPrefix([]string{a, b, c}[i], "http") + "/api/channels/terminal-dev/ws"
				if s.URL != want || s.Devices != 2 || s.Connected != 2 {
					t.Errorf("server %d: %+v, want %s with 2 devices connected", i, s, want)
				}
			}
			if rep.Connected != 6 || rep.Sent == 0 || rep.Replied != rep.Sent || rep.Lost != 0 {
				t.Errorf("report %+v, want 6 devices and every message answered", rep)
			}
			if len(mode) > 0 && rep.DupReplies != 0 {
				t.Errorf("%d duplicate replies: a link.Client delivers each reply once, across moves too", rep.DupReplies)
			}
			if rep.Moves < 6 || rep.MovesFailed != 0 {
				t.Errorf("moves %d failed %d, want every device moved, none failed", rep.Moves, rep.MovesFailed)
			}
		})
	}

	// The text report says so too.
	code, stdout, stderr := runTermrig(t, "load", "--server", a+","+b, "--devices", "2", "--rate", "10",
		"--duration", "300ms", "--move", "100ms")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q, stdout %s", code, stderr, stdout)
	}
	for _, want := range []string{"servers       2, devices spread round-robin", "server 2      1 devices  connected 1",
		"moves         every 100ms: moves ", "result        ok"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("text report lacks %q:\n%s", want, stdout)
		}
	}
}

// --report-reconnects needs --client and a file it can create; --ca-file
// must hold a certificate; a run with both writes the (here empty) log.
func TestLoadReconnectFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--report-reconnects", filepath.Join(dir, "r.jsonl")}, "--report-reconnects follows link.Client's reconnects: add --client"},
		{[]string{"--client", "--report-reconnects", filepath.Join(dir, "no", "such", "r.jsonl")}, "--report-reconnects: open "},
		{[]string{"--ca-file", filepath.Join(dir, "missing.pem")}, "CA file: open "},
		{[]string{"--latency-log", filepath.Join(dir, "no", "such", "lat.txt")}, "--latency-log: open "},
	} {
		code, stdout, stderr := runTermrig(t, append([]string{"load", "--server", "ws://127.0.0.1:1"}, tt.args...)...)
		if code != 2 || !strings.Contains(stderr, tt.want) || stdout != "" {
			t.Errorf("%v: exit %d stderr %q stdout %q, want 2 and %q", tt.args, code, stderr, stdout, tt.want)
		}
	}
	log := filepath.Join(dir, "reconnects.jsonl")
	code, stdout, stderr := runTermrig(t, "load", "--server", echoServer(t, false), "--client", "--devices", "2",
		"--rate", "10", "--duration", "200ms", "--report-reconnects", log)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q, stdout %s", code, stderr, stdout)
	}
	if b, err := os.ReadFile(log); err != nil || len(b) != 0 {
		t.Errorf("reconnect log %q, %v: want an empty file (no device lost its link)", b, err)
	}
}
