package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/internal/syncbuf"
	"termlink/internal/testwait"
	"termlink/link"
)

func runTermrig(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	var out, errOut bytes.Buffer
	code = run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsage(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string
		stderr     string
		noStdout   bool
		noStderror bool
	}{
		{name: "no args", args: nil, code: 2, stderr: "load ", noStdout: true},
		{name: "help", args: []string{"help"}, code: 0, stdout: "Commands:", noStderror: true},
		{name: "--help", args: []string{"--help"}, code: 0, stdout: "load "},
		{name: "help load", args: []string{"help", "load"}, code: 0, stdout: "-connect-rate"},
		{name: "help load client", args: []string{"help", "load"}, code: 0, stdout: "-client\n    \tmake every device a real link.Client"},
		{name: "help load outbox", args: []string{"help", "load"}, code: 0, stdout: "-outbox kind"},
		{name: "load -h", args: []string{"load", "-h"}, code: 0, stdout: "Usage: termrig load --server URL"},
		{name: "unknown", args: []string{"nope"}, code: 2, stderr: `unknown command "nope"`, noStdout: true},
		{name: "help unknown", args: []string{"help", "nope"}, code: 2, stderr: `unknown command "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runTermrig(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, stderr)
			}
			if !strings.Contains(stdout, tt.stdout) || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stdout %q, stderr %q; want %q and %q in them", stdout, stderr, tt.stdout, tt.stderr)
			}
			if tt.noStdout && stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			if tt.noStderror && stderr != "" {
				t.Errorf("stderr %q, want nothing", stderr)
			}
		})
	}
}

func TestLoadFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{}, "--server is required"},
		{[]string{"--server", "ws://h", "--rate", "abc"}, `invalid value "abc" for flag -rate: must be a number`},
		{[]string{"--server", "ws://h", "--devices", "0"}, "--devices must be at least 1, got 0"},
		{[]string{"--server", "ws://h", "--devices", "many"}, `invalid value "many" for flag -devices: must be a whole number`},
		{[]string{"--server", "ws://h", "--rate", "-1"}, "--rate must be 0 or more"},
		{[]string{"--server", "ws://h", "--rate", "NaN"}, `invalid value "NaN" for flag -rate: must be a number`},
		{[]string{"--server", "ws://h", "--duration", "5"}, `invalid value "5" for flag -duration: must be a duration with a unit, like 500ms, 10s or 2m (time: missing unit in duration "5")`},
		{[]string{"--server", "ws://h", "--duration", "0s"}, "--duration must be positive"},
		{[]string{"--server", "ws://h", "--drain", "-1s"}, "--drain must not be negative"},
		{[]string{"--server", "ws://h", "--connect-rate", "0"}, "--connect-rate must be at least 1"},
		{[]string{"--server", "ws://h", "--hold", "--rate", "5"}, "use it with --rate 0"},
		{[]string{"--server", "ftp://h"}, "--server: server URL \"ftp://h\": scheme must be ws, wss, http or https"},
		{[]string{"--server", "ws://h", "--text", "   "}, "text must not be blank"},
		{[]string{"--server", "ws://h", "extra"}, `unexpected argument "extra"`},
		{[]string{"--server", "ws://h", "--outbox", "file"}, "--outbox is the outbox of --client devices: add --client"},
		{[]string{"--server", "ws://h", "--client", "--outbox", "disk"}, `--outbox must be memory or file, got "disk"`},
		{[]string{"--server", "ws://h", "--client=maybe"}, `invalid boolean value "maybe" for -client`},
		{[]string{"--nope"}, "flag provided but not defined: -nope"},
		// Several servers and --move.
		{[]string{"--server", "ws://a", "--server", ""}, "--server: server URL 2 of 2 is empty"},
		{[]string{"--server", "ws://a,,ws://c"}, "--server: server URL 2 of 3 is empty"},
		{[]string{"--server", "ws://a,ftp://b"}, `--server: server URL "ftp://b": scheme must be ws, wss, http or https`},
		{[]string{"--server", "ws://a", "--move", "1s"}, "--move hops devices between servers: give at least two --server URLs, got 1"},
		{[]string{"--server", "ws://a,ws://b", "--move", "-1s"}, "--move must not be negative, got -1s"},
		{[]string{"--server", "ws://a,ws://b", "--move", "soon"}, `invalid value "soon" for flag -move`},
		{[]string{"--move", "1s"}, "--server is required"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runTermrig(t, append([]string{"load"}, tt.args...)...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.Contains(stderr, tt.want) || !strings.HasPrefix(stderr, "termrig load: ") {
				t.Errorf("stderr %q, want it to start with \"termrig load: \" and contain %q", stderr, tt.want)
			}
			if !strings.Contains(stderr, "termrig load -h") {
				t.Errorf("stderr %q does not point at -h", stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
		})
	}
}

// echoServer is a minimal channel server: connected, ack, echo reply, pong.
// With refuse set it answers every upgrade with 401.
func echoServer(t *testing.T, refuse bool) string {
	t.Helper()
	var active atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuse {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		conn, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		active.Add(1)
		defer active.Add(-1)
		defer conn.Close()
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				return
			}
			f, err := link.Decode(data)
			if err != nil {
				continue
			}
			var out []link.Frame
			switch f := f.(type) {
			case *link.Connect:
				out = append(out, &link.Connected{ChannelID: "terminal-dev", SessionID: "terminal-dev:local:" + f.PeerID})
			case *link.Message:
				out = append(out, &link.Ack{MessageID: f.MessageID, SessionID: "s", Accepted: true},
					&link.Message{Role: link.RoleAssistant, MessageID: f.MessageID, Text: f.Text, FinishReason: link.FinishStop})
			case *link.Ping:
				out = append(out, &link.Pong{})
			}
			for _, f := range out {
				conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
				if conn.WriteMessage(websocket.TextMessage, link.MustEncode(f)) != nil {
					return
				}
			}
		}
	}))
	t.Cleanup(func() {
		srv.Close()
		testwait.UntilOK(t, "every server connection closed after termrig load returned", func() error {
			if n := active.Load(); n > 0 {
				return fmt.Errorf("%d still open", n)
			}
			return nil
		})
	})
	return srv.URL
}

func TestLoadJSON(t *testing.T) {
	url := echoServer(t, false)
	code, stdout, stderr := runTermrig(t, "load", "--server", url, "--devices", "3", "--rate", "40",
		"--duration", "250ms", "--drain", "2s", "--json", "--peer-prefix", "cmdtest")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q, stdout %s", code, stderr, stdout)
	}
	var rep struct {
		URL       string  `json:"url"`
		Connected int     `json:"devices_connected"`
		Sent      int64   `json:"sent"`
		Replied   int64   `json:"replied"`
		Lost      int64   `json:"lost"`
		Rate      float64 `json:"rate"`
		RoundTrip struct {
			N   int     `json:"n"`
			P50 float64 `json:"p50"`
		} `json:"round_trip_ms"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout is not a JSON report: %v\n%s", err, stdout)
	}
	if !strings.HasSuffix(rep.URL, "/api/channels/terminal-dev/ws") || !strings.HasPrefix(rep.URL, "ws://") {
		t.Errorf("url %q, want the ws:// channel path filled in", rep.URL)
	}
	if rep.Connected != 3 || rep.Sent == 0 || rep.Replied != rep.Sent || rep.Lost != 0 || rep.RoundTrip.N != int(rep.Sent) || rep.Rate != 40 {
		t.Errorf("report %+v, want 3 devices and every message answered", rep)
	}
}

func TestLoadTextFailure(t *testing.T) {
	url := echoServer(t, true)
	code, stdout, stderr := runTermrig(t, "load", "--server", url, "--devices", "2", "--duration", "50ms")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{"requested 2  connected 0  failed 2", "2× websocket upgrade refused: HTTP 401 Unauthorized", "result"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("text report lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "termrig load: 2 of 2 devices failed to connect") {
		t.Errorf("stderr %q, want the failure", stderr)
	}
}

func TestLoadHoldInterrupted(t *testing.T) {
	url := echoServer(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr := &syncbuf.Buffer{}
	var errOut bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"load", "--server", url, "--devices", "4", "--hold"}, pr, &errOut) }()
	testwait.UntilOK(t, `the line "connected 4 devices"`, func() error {
		if !strings.Contains(pr.String(), "connected 4 devices\n") {
			return fmt.Errorf("stdout %q", pr.String())
		}
		return nil
	})
	cancel() // as Ctrl-C does
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after Ctrl-C in hold mode, want 0; stderr %q", code, errOut.String())
		}
	case <-time.After(testwait.Deadline):
		t.Fatal("termrig load --hold did not stop on cancel")
	}
	if out := pr.String(); !strings.HasPrefix(out, "connected 4 devices\n") || !strings.Contains(out, "(interrupted)") {
		t.Errorf("stdout %q, want the connected line then the report", out)
	}
}

// --client: every device a link.Client; the report says so.
func TestLoadClient(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // the file outboxes' state dirs
	url := echoServer(t, false)
	code, stdout, stderr := runTermrig(t, "load", "--client", "--server", url, "--devices", "3", "--rate", "40",
		"--duration", "250ms", "--drain", "2s", "--json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q, stdout %s", code, stderr, stdout)
	}
	var rep struct {
		Mode       string `json:"mode"`
		Outbox     string `json:"outbox"`
		Connected  int    `json:"devices_connected"`
		Sent       int64  `json:"sent"`
		Replied    int64  `json:"replied"`
		Lost       int64  `json:"lost"`
		DupReplies int64  `json:"duplicate_replies"`
		Reconnects *int   `json:"reconnects"`
		Client     *struct {
			Sessions int64 `json:"sessions"`
		} `json:"client"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout is not a JSON report: %v\n%s", err, stdout)
	}
	if rep.Mode != "client" || rep.Outbox != "memory" || rep.Reconnects == nil || rep.Client == nil || rep.Client.Sessions != 3 {
		t.Errorf("mode %q outbox %q reconnects %v client %+v, want client, memory, 0 and 3 sessions", rep.Mode, rep.Outbox, rep.Reconnects, rep.Client)
	}
	if rep.Connected != 3 || rep.Sent == 0 || rep.Replied != rep.Sent || rep.Lost != 0 || rep.DupReplies != 0 {
		t.Errorf("report %+v, want 3 devices and every message answered once", rep)
	}

	code, stdout, stderr = runTermrig(t, "load", "--client", "--outbox", "file", "--server", url, "--devices", "2",
		"--rate", "20", "--duration", "200ms")
	if code != 0 {
		t.Fatalf("--outbox file: exit %d, stderr %q, stdout %s", code, stderr, stdout)
	}
	for _, want := range []string{"every device a link.Client (file outbox)", "reconnects 0", "client        dials 2  sessions 2", "result        ok"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("text report lacks %q:\n%s", want, stdout)
		}
	}
}
