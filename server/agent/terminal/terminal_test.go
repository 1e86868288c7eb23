//go:build unix

package terminal

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"termlink/server/agent"
	"termlink/server/config"
)

func TestEnvelope(t *testing.T) {
	t.Parallel()
	providers := map[string]config.Provider{
		"anthropic": {APIKeys: []string{"sk-ant-1"}, Models: []string{"claude-a", "claude-b"}},
		"replicate": {APIKeys: []string{"r8_1", "r8_2"}, BaseURL: "https://api.replicate.com/v1"},
	}
	tests := []struct {
		name      string
		passMedia bool
		media     []string
		providers map[string]config.Provider
		chatID    string
		want      func(ws string) map[string]any
	}{
		{
			name: "media and providers", passMedia: true, media: []string{"/m/a.jpg", "/m/b.pdf"}, providers: providers, chatID: "peer1",
			want: func(ws string) map[string]any {
				return map[string]any{
					"version": 1.0, "text": "hi <&> \"q\" ü\n2nd", "media": []any{"/m/a.jpg", "/m/b.pdf"},
					"channel": "terminal-dev", "chat_id": "peer1", "session_key": "terminal-dev:peer1",
					"workspace": ws, "user_data_dir": filepath.Join(ws, "users", "peer1"),
					"providers": map[string]any{
						"anthropic": map[string]any{"api_keys": []any{"sk-ant-1"}, "models": []any{"claude-a", "claude-b"}},
						"replicate": map[string]any{"api_keys": []any{"r8_1", "r8_2"}, "base_url": "https://api.replicate.com/v1"},
					},
				}
			},
		},
		{
			name: "media without passMedia", passMedia: false, media: []string{"/m/a.jpg"}, chatID: "peer1:thread-2",
			want: func(ws string) map[string]any {
				return map[string]any{
					"version": 1.0, "text": "hi <&> \"q\" ü\n2nd",
					"channel": "terminal-dev", "chat_id": "peer1:thread-2", "session_key": "terminal-dev:peer1",
					"workspace": ws, "user_data_dir": filepath.Join(ws, "users", "peer1:thread-2"),
				}
			},
		},
		{
			name: "passMedia without media", passMedia: true, chatID: "../../escape",
			want: func(ws string) map[string]any {
				return map[string]any{
					"version": 1.0, "text": "hi <&> \"q\" ü\n2nd",
					"channel": "terminal-dev", "chat_id": "../../escape", "session_key": "terminal-dev:peer1",
					"workspace": ws, "user_data_dir": filepath.Join(ws, "users", DirName("../../escape")),
				}
			},
		},
	}
	for _, tt := range tests {
		for _, mode := range startModes {
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				dump := filepath.Join(t.TempDir(), "envelope.json")
				cfg := rich(agentCommand(t, mode, `cat > "$DUMP"; echo '{"type":"message","text":"ok"}'`))
				cfg.PassMedia = tt.passMedia
				cfg.Providers = tt.providers
				cfg.Env = map[string]string{"DUMP": dump}
				f := newFixture(t, cfg)
				req := f.req("hi <&> \"q\" ü\n2nd")
				req.Media = tt.media
				req.ChatID = tt.chatID
				res, _ := f.run(context.Background(), req)
				wantResult(t, res, "stop")
				if res.Text != "ok" {
					t.Fatalf("reply %q", res.Text)
				}
				raw, err := os.ReadFile(dump)
				if err != nil {
					t.Fatal(err)
				}
				if bytes.Count(raw, []byte("\n")) != 1 || raw[len(raw)-1] != '\n' {
					t.Fatalf("envelope is not one line and a newline: %q", raw)
				}
				for _, camel := range []string{"apiKeys", "baseUrl", "chatId", "sessionKey", "userDataDir", `\u003c`} {
					if bytes.Contains(raw, []byte(camel)) {
						t.Errorf("envelope contains %q: %s", camel, raw)
					}
				}
				var got map[string]any
				if err := json.Unmarshal(raw, &got); err != nil {
					t.Fatal(err)
				}
				want := tt.want(f.ws)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("envelope\n got %v\nwant %v", got, want)
				}
				udd := want["user_data_dir"].(string)
				st, err := os.Stat(udd)
				if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
					t.Fatalf("user_data_dir %s: %v %v", udd, st, err)
				}
				if filepath.Dir(udd) != filepath.Join(f.ws, "users") {
					t.Fatalf("user_data_dir %s is not in %s/users", udd, f.ws)
				}
			})
		}
	}
}

func TestWorkingDirectoryAndRelativeWorkspace(t *testing.T) {
	t.Parallel()
	for _, mode := range startModes {
		// $PWD as well as the directory itself: sh sets PWD.
		f := newFixture(t, plain(agentCommand(t, mode, `pwd; echo "$PWD"`)))
		res := f.text("x")
		if res.Text != f.ws+"\n"+f.ws {
			t.Fatalf("%s: pwd = %q, want %q twice", mode, res.Text, f.ws)
		}
	}
	f := newFixture(t, plain("pwd"))
	req := f.req("x")
	req.Workspace = ""
	wantResult(t, f.r.Run(context.Background(), req, nil), "error", "no workspace")
}

func TestDirName(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, prefix string }{
		{"peer1", "peer1"},
		{"peer1:thread", "peer1:thread"},
		{"a-b_c.d@e+f=g", "a-b_c.d@e+f=g"},
		{"", "_-"},
		{".", "_-"},
		{"..", "_.-"},
		{"../../etc/passwd", "_._.._etc_passwd-"},
		{"a/b", "a_b-"},
		{"a\x00b", "a_b-"},
		{"ü", "__-"},
		{strings.Repeat("x", 300), strings.Repeat("x", 128) + "-"},
	}
	for _, tt := range tests {
		got := DirName(tt.in)
		if !strings.HasPrefix(got, tt.prefix) || (tt.prefix == tt.in && got != tt.in) {
			t.Errorf("DirName(%q) = %q, want prefix %q", tt.in, got, tt.prefix)
		}
		if got == "." || got == ".." || strings.ContainsAny(got, "/\x00") || len(got) > 255 {
			t.Errorf("DirName(%q) = %q is not a safe name", tt.in, got)
		}
	}
	if DirName("a/b") == DirName("a_b") || DirName("a/b") == DirName("a\\b") {
		t.Error("different chat ids share a directory")
	}
}

func TestRichFrames(t *testing.T) {
	t.Parallel()
	img := filepath.Join(t.TempDir(), "out.png")
	os.WriteFile(img, []byte("png"), 0o644)
	script := writeScript(t, `read -r line
printf '%s\n' '{"type":"progress","text":"step 1"}'
printf '%s\n' '{"type":"log","text":"calling api","level":"info"}'
printf '%s\n' '{"type":"log","text":"debug detail"}'
printf '%s\n' '{"type":"message","text":"first"}'
printf '%s\n' '{"type":"progress","text":"step 2"}'
printf '%s\n' '{"type":"message","text":"second","media":["`+img+`","/no/such/file.png"]}'
printf '%s\n' '{"type":"message","text":"","media":["rel.txt"]}'
`)
	f := newFixture(t, rich(script))
	os.WriteFile(filepath.Join(f.ws, "rel.txt"), []byte("x"), 0o644)
	res, progress := f.run(context.Background(), f.req("go"))
	wantResult(t, res, "stop")
	if res.Text != "first\n\nsecond" {
		t.Errorf("reply %q", res.Text)
	}
	if want := []string{img, filepath.Join(f.ws, "rel.txt")}; !reflect.DeepEqual(res.Media, want) {
		t.Errorf("media %v, want %v", res.Media, want)
	}
	if want := []string{"step 1", "step 2"}; !reflect.DeepEqual(progress, want) {
		t.Errorf("progress %v, want %v", progress, want)
	}
	if !f.logs.has("INFO agent log text=calling api") || !f.logs.has("DEBUG agent log text=debug detail") {
		t.Errorf("log frames not logged at their level: %v", f.logs.recs)
	}
	for _, r := range f.logs.recs {
		if strings.Contains(r, "calling api") && strings.Contains(res.Text, "calling api") {
			t.Error("log frame text reached the user")
		}
	}
}

// TestProgressIsImmediate checks that a progress frame reaches the callback
// while the agent still runs: the agent waits, after it, for a file the
// test creates only once the progress came.
func TestProgressIsImmediate(t *testing.T) {
	t.Parallel()
	gate := filepath.Join(t.TempDir(), "gate")
	f := newFixture(t, rich(agentCommand(t, "direct", `echo '{"type":"progress","text":"sleeping"}'
while [ ! -e `+ShellQuote(gate)+` ]; do sleep 0.01; done
echo '{"type":"message","text":"slept"}'`)))
	got := make(chan string, 4)
	done := make(chan agent.Result, 1)
	go func() {
		done <- f.r.Run(context.Background(), f.req("x"), func(s string) { got <- s })
	}()
	select {
	case p := <-got:
		if p != "sleeping" {
			t.Errorf("progress %q", p)
		}
	case <-done:
		t.Fatal("Run returned before the progress frame was delivered")
	case <-time.After(runTimeout):
		t.Fatal("progress frame not delivered while the agent runs")
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		wantResult(t, res, "stop", "slept")
	case <-time.After(runTimeout):
		t.Fatal("Run did not return")
	}
}

func TestErrorFrame(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, text string
		finish           string
	}{
		{"error frame, exit 1", `echo '{"type":"message","text":"partial"}'; echo '{"type":"error","text":"API rate limit exceeded","code":"RATE"}'; exit 1`,
			"partial\n\nAPI rate limit exceeded\n\n(exit code 1)", "error"},
		{"error frame, exit 0", `echo '{"type":"error","text":"Failed to render image","code":"RENDER_FAIL"}'`,
			"Failed to render image", "error"},
		{"error frame without text", `echo '{"type":"error","code":"X1"}'`,
			"the agent reported an error (X1)", "error"},
		{"error frame and stderr", `echo '{"type":"error","text":"boom"}'; echo 'Traceback' >&2; exit 2`,
			"boom\n\nSTDERR: Traceback\n\n(exit code 2)", "error"},
		{"exit code without frame", `echo '{"type":"message","text":"half"}'; exit 3`,
			"half\n\n(exit code 3)", "error"},
		{"exit code without output", `exit 4`, "(exit code 4)", "error"},
		{"killed by a signal", `kill -9 $$`, "(agent ended by signal: killed)", "error"},
		{"no output", `true`, "(no output)", "stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, rich(tt.body))
			res := f.text("x")
			if res.Text != tt.text || res.FinishReason != tt.finish {
				t.Fatalf("got %q %q, want %q %q", res.FinishReason, res.Text, tt.finish, tt.text)
			}
		})
	}
	// The Go agent's error frame.
	f := newFixture(t, rich(ShellQuote(echoAgent)))
	var events []string
	req := f.req("/error")
	req.Event = func(name, detail string) { events = append(events, name+" "+detail) }
	res, _ := f.run(context.Background(), req)
	if res.Text != "requested error\n\n(exit code 1)" || res.FinishReason != "error" {
		t.Fatalf("echo agent /error: %+v", res)
	}
	if !reflect.DeepEqual(events, []string{"agent_error ECHO_ERROR requested error"}) {
		t.Fatalf("events %v", events)
	}
}

func TestNonFrameLines(t *testing.T) {
	t.Parallel()
	img := filepath.Join(t.TempDir(), "chart.png")
	os.WriteFile(img, []byte("png"), 0o644)
	script := writeScript(t, `cat >/dev/null
echo 'plain line one'
echo '{"type":"message","text":"framed"}'
echo '{"no_type":true}'
echo '{"type":7,"text":"numeric type"}'
echo '{"type":"weird","text":"unknown"}'
echo '{"type":null,"text":"null type"}'
echo '[1,2]'
echo '{"type":"message","text":5}'
echo '{broken json'
echo ''
echo 'see `+img+` and /no/such.png'
`)
	f := newFixture(t, rich(script))
	res := f.text("x")
	wantResult(t, res, "stop")
	// A message frame whose text is not a string shows the value (5),
	// not the raw line.
	want := "framed\n\n5\n\nplain line one\n" +
		`{"no_type":true}` + "\n" +
		"[1,2]\n" +
		"{broken json\n\n" +
		"see " + img + " and /no/such.png"
	if res.Text != want {
		t.Errorf("reply\n%q\nwant\n%q", res.Text, want)
	}
	if !reflect.DeepEqual(res.Media, []string{img}) {
		t.Errorf("media %v", res.Media)
	}
	// Frames of an unknown type (7, "weird", null) are dropped with a log
	// line, as nanobot ignores them; they are not shown as raw JSON.
	f.logs.mu.Lock()
	n := 0
	for _, r := range f.logs.recs {
		if r == "INFO agent frame of an unknown type dropped" {
			n++
		}
	}
	f.logs.mu.Unlock()
	if n != 3 {
		t.Errorf("%d log lines for the 3 dropped frames: %v", n, f.logs.recs)
	}
}

func TestPlainMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var files []string
	for _, name := range []string{"a.JPG", "b.mp4", "c.flac", "d.pdf", "e.txt"} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte("x"), 0o644)
		files = append(files, p)
	}
	out := fmt.Sprintf("Result:\n  image %s\n  video (%s)\n  audio '%s'.\n  doc=%s\n  text %s\n  missing %s/none.png\n",
		files[0], files[1], files[2], files[3], files[4], dir)
	f := newFixture(t, plain("printf '%s' "+ShellQuote(out)+`; echo '{"type":"message","text":"not parsed"}'`))
	res := f.text("x")
	wantResult(t, res, "stop")
	if want := strings.TrimRight(out, "\n") + "\n" + `{"type":"message","text":"not parsed"}`; res.Text != want {
		t.Errorf("reply %q, want %q", res.Text, want)
	}
	if want := files[:4]; !reflect.DeepEqual(res.Media, want) {
		t.Errorf("media %v, want %v", res.Media, want)
	}
	// The Go agent in plain mode.
	f = newFixture(t, plain(ShellQuote(echoAgent)+" -plain"))
	wantResult(t, f.text("hello"), "stop", "You said: hello")
}

func TestMessagePlaceholder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	touched := filepath.Join(dir, "touched")
	backtick := filepath.Join(dir, "backtick")
	texts := []string{
		"it's \"quoted\" 'single' \\back\\slash",
		"$(touch " + touched + ")",
		"`touch " + backtick + "`",
		"line one\nline two\n\n  indented; echo injected && false || true &",
		"$HOME ${PATH} * ? [a] ~ # %s \t tab",
		"'",
		"",
		"ü 日本 \x00nul",
	}
	args := writeScript(t, `printf '%s' "$1" > out.txt; printf '[%s]' "$1"`)
	for _, command := range []string{`printf '%s' {message} > out.txt; printf '[%s]' {message}`, ShellQuote(args) + " {message}"} {
		testPlaceholder(t, command, texts)
	}
	for _, p := range []string{touched, backtick} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was created: the text was run by the shell", p)
		}
	}
	// {message} and stdin together.
	for _, mode := range startModes {
		f := newFixture(t, rich(goAgentCommand(t, mode, "{message}")))
		wantResult(t, f.text("it's $(x)"), "stop", "You said: it's $(x)")
	}
}

func testPlaceholder(t *testing.T, command string, texts []string) {
	f := newFixture(t, plain(command))
	for _, text := range texts {
		res := f.text(text)
		want := strings.ReplaceAll(text, "\x00", "")
		wantResult(t, res, "stop")
		if got, _ := os.ReadFile(filepath.Join(f.ws, "out.txt")); string(got) != want {
			t.Errorf("argument for %q arrived as %q", text, got)
		}
		if res.Text != cleanText("["+want+"]") {
			t.Errorf("%s: reply for %q is %q", command, text, res.Text)
		}
	}
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":      "''",
		"a b":   "'a b'",
		"it's":  `'it'\''s'`,
		"''":    `''\'''\'''`,
		"$(x)`": "'$(x)`'",
	} {
		if got := ShellQuote(in); got != want {
			t.Errorf("ShellQuote(%q) = %s, want %s", in, got, want)
		}
	}
	if got := ExpandCommand("a {message} b {message}", "x y"); got != "a 'x y' b 'x y'" {
		t.Errorf("ExpandCommand = %s", got)
	}
	if got := ExpandCommand("no placeholder", "x"); got != "no placeholder" {
		t.Errorf("ExpandCommand = %s", got)
	}
}

func TestTimeoutKillsGrandchild(t *testing.T) {
	t.Parallel()
	for _, mode := range startModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testTimeoutKillsGrandchild(t, mode)
		})
	}
}

func testTimeoutKillsGrandchild(t *testing.T, mode string) {
	// A shell agent whose grandchild holds stdout.
	cfg := rich(agentCommand(t, mode, `sleep 1000 & echo $! > gc.pid; echo '{"type":"progress","text":"started"}'; echo '{"type":"message","text":"early"}'; wait`))
	cfg.Timeout = 1
	f := newFixture(t, cfg)
	// The grandchild holds stdout for 1000 s: Run returning at all (f.run
	// bounds it by runTimeout) is the timeout ending it; the runner's own
	// log says why it killed, and that one group kill was enough.
	res, progress := f.run(context.Background(), f.req("x"))
	f.logs.wantOrder(t, "INFO killing the agent")
	if f.logs.has(msgLeftBehind) {
		t.Errorf("the timeout's group kill left the grandchild holding stdout: %v", f.logs.all())
	}
	if res.FinishReason != "timeout" || res.Text != "early\n\nagent timed out after 1s" {
		t.Errorf("result %+v", res)
	}
	if !reflect.DeepEqual(progress, []string{"started"}) {
		t.Errorf("progress %v", progress)
	}
	waitGone(t, readPid(t, filepath.Join(f.ws, "gc.pid")))

	// The Go agent's grandchild.
	cfg = rich(goAgentCommand(t, mode, ""))
	cfg.Timeout = 1
	f = newFixture(t, cfg)
	res, progress = f.run(context.Background(), f.req("/grandchild"))
	wantResult(t, res, "timeout", "agent timed out after 1s")
	if len(progress) != 1 || !strings.HasPrefix(progress[0], "grandchild ") {
		t.Fatalf("progress %v", progress)
	}
	pid, _ := strconv.Atoi(strings.TrimPrefix(progress[0], "grandchild "))
	waitGone(t, pid)
}

func TestLeftoverProcessHoldingStdout(t *testing.T) {
	t.Parallel()
	f := newFixture(t, rich(ShellQuote(echoAgent)))
	// The grandchild holds stdout for 1000 s: after the grace the runner
	// kills the group (its log says so, and nothing was killed before the
	// agent exited) and Run returns with the agent's reply.
	res := f.text("/orphan")
	f.logs.wantOrder(t, msgLeftBehind)
	if f.logs.has("INFO killing the agent") {
		t.Errorf("the agent was killed before it exited: %v", f.logs.all())
	}
	wantResult(t, res, "stop", "left grandchild ")
	pid, _ := strconv.Atoi(strings.TrimPrefix(res.Text, "left grandchild "))
	waitGone(t, pid)

	// Output written by a leftover process within the grace is kept (a
	// grace of seconds: a loaded machine took more than 200 ms to run
	// sleep 0.05 and echo; the run ends when the leftover closes stdout).
	f = newFixture(t, rich(`(sleep 0.05; echo '{"type":"message","text":"late"}') & echo '{"type":"message","text":"main"}'`), Options{KillGrace: 30 * time.Second})
	if res := f.text("x"); res.Text != "main\n\nlate" {
		t.Errorf("reply %q", res.Text)
	}

	// A background process that closed stdout and stderr is neither
	// waited for nor killed.
	f = newFixture(t, plain(`sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > bg.pid; echo done`))
	wantResult(t, f.text("x"), "stop", "done")
	if f.logs.has(msgLeftBehind) {
		t.Errorf("Run waited out the grace for a detached background process: %v", f.logs.all())
	}
	bg := readPid(t, filepath.Join(f.ws, "bg.pid"))
	if processGone(bg) {
		t.Errorf("detached background process %d was killed", bg)
	}
	syscall.Kill(bg, syscall.SIGKILL) // clean up
	waitGone(t, bg)
}

// TestEscapedProcessHoldingStdout: a process that left the agent's group
// (setsid) and holds its stdout cannot be killed with the group; Run stops
// reading and returns anyway.
func TestEscapedProcessHoldingStdout(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid is not installed")
	}
	// The agent answers only once the escaped process has left the group
	// (its pid file appears after setsid), so the run's group kill cannot
	// reach it first on a busy machine.
	f := newFixture(t, rich(`setsid sh -c 'echo $$ > esc.tmp; mv esc.tmp esc.pid; exec sleep 1000' & while [ ! -s esc.pid ]; do sleep 0.01; done; echo '{"type":"message","text":"main"}'`))
	// Run must not wait for the escaped process, which holds stdout open
	// for 1000 s: f.text bounds Run by runTimeout, and the runner's log
	// shows the path it took: the group kill first, then giving up on
	// the output.
	res := f.text("x")
	pid := readPid(t, filepath.Join(f.ws, "esc.pid"))
	defer func() {
		syscall.Kill(pid, syscall.SIGKILL)
		waitGone(t, pid)
	}()
	f.logs.wantOrder(t, msgLeftBehind, "WARN a process outside the agent's group holds its output open; no longer reading it")
	wantResult(t, res, "stop")
	if res.Text != "main" {
		t.Errorf("reply %q", res.Text)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	for _, mode := range startModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testCancel(t, mode)
		})
	}
}

func testCancel(t *testing.T, mode string) {
	f := newFixture(t, rich(agentCommand(t, mode, `sleep 1000 & echo $! > gc.pid; echo '{"type":"progress","text":"working"}'; wait`)))
	ctx, cancel := context.WithCancel(context.Background())
	progressed := make(chan struct{})
	var once sync.Once
	done := make(chan agent.Result, 1)
	go func() {
		done <- f.r.Run(ctx, f.req("x"), func(string) { once.Do(func() { close(progressed) }) })
	}()
	select {
	case <-progressed:
	case <-time.After(runTimeout):
		t.Fatal("no progress")
	}
	cancel()
	select {
	case res := <-done:
		// Ended by the cancel (the agent would sleep 1000 s): the result
		// says so and the runner killed the agent for it.
		wantResult(t, res, "cancelled", "cancelled")
		f.logs.wantOrder(t, "INFO killing the agent")
	case <-time.After(runTimeout):
		t.Fatal("Run ignored the cancelled context")
	}
	waitGone(t, readPid(t, filepath.Join(f.ws, "gc.pid")))

	// Already cancelled: nothing runs.
	res := f.r.Run(ctx, f.req("x"), nil)
	wantResult(t, res, "cancelled")
}

func TestClose(t *testing.T) {
	t.Parallel()
	for _, mode := range startModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testClose(t, mode)
		})
	}
}

func testClose(t *testing.T, mode string) {
	f := newFixture(t, rich(agentCommand(t, mode, `echo $$ > main.pid; echo '{"type":"progress","text":"up"}'; sleep 1000`)))
	up := make(chan struct{}, 1)
	done := make(chan agent.Result, 1)
	go func() {
		done <- f.r.Run(context.Background(), f.req("x"), func(string) { up <- struct{}{} })
	}()
	<-up
	closed := make(chan struct{})
	go func() { f.r.Close(); close(closed) }()
	select {
	case res := <-done:
		wantResult(t, res, "cancelled", "shutting down")
	case <-time.After(runTimeout):
		t.Fatal("Close did not end the run")
	}
	select {
	case <-closed:
	case <-time.After(runTimeout):
		t.Fatal("Close did not return")
	}
	waitGone(t, readPid(t, filepath.Join(f.ws, "main.pid")))
	wantResult(t, f.r.Run(context.Background(), f.req("x"), nil), "error", "stopped")
	if err := f.r.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestStderr(t *testing.T) {
	t.Parallel()
	// 8 MiB of stderr must not stall the agent; the reply keeps 64 KiB.
	// A stalled agent would end by the 20 s timeout ("timeout", not "stop").
	f := newFixture(t, rich(ShellQuote(echoAgent)))
	res := f.text("/stderr 8388608")
	wantResult(t, res, "stop", "wrote 8388608 bytes to stderr\n\nSTDERR: eeee",
		fmt.Sprintf("[... %d more bytes of stderr not shown]", 8388608-DefaultMaxStderrBytes))
	if len(res.Text) > DefaultMaxStderrBytes+200 {
		t.Errorf("reply is %d bytes", len(res.Text))
	}
	// Small stderr is appended whole, after the reply.
	f = newFixture(t, plain(`echo out; echo warn 1 >&2; echo warn 2 >&2`))
	if res := f.text("x"); res.Text != "out\n\nSTDERR: warn 1\nwarn 2" || res.FinishReason != "stop" {
		t.Errorf("reply %+v", res)
	}
}

func TestOutputLimits(t *testing.T) {
	t.Parallel()
	// A 2 MiB line, from the Go agent.
	f := newFixture(t, rich(ShellQuote(echoAgent)))
	res := f.text("/bigline")
	if res.Text != "agent output line longer than 1 MiB" || res.FinishReason != "error" {
		t.Errorf("2 MiB line: %+v", clip(res.Text))
	}
	// A line of exactly the limit passes.
	f = newFixture(t, rich(ShellQuote(echoAgent)), Options{MaxLineBytes: 1000})
	res = f.text("/bigline 980") // 980 bytes of text plus the frame's JSON
	if res.FinishReason != "error" {
		t.Errorf("over-long line passed: %q", clip(res.Text))
	}
	res = f.text("/bigline 900")
	if res.FinishReason != "stop" || len(res.Text) != 900 {
		t.Errorf("line under the limit: %q", clip(res.Text))
	}

	// A long line that never ends, from an agent that would run forever.
	// The limit kills it (the timeout, 20 s, would say "timeout").
	f = newFixture(t, rich(`head -c 3000000 /dev/zero | tr '\0' x; sleep 1000`))
	wantResult(t, f.text("x"), "error", "agent output line longer than 1 MiB")
	f.logs.wantOrder(t, "WARN agent output limit hit; killing the agent")

	// Endless output, both modes.
	for _, mode := range []string{"rich", "plain"} {
		cfg := rich(`yes 'hello world'`)
		cfg.Protocol = mode
		cfg.MaxOutputBytes = 100000
		f = newFixture(t, cfg)
		res := f.text("x")
		if res.Text != "agent output over 100000 bytes" || res.FinishReason != "error" {
			t.Errorf("%s: endless output: %q", mode, clip(res.Text))
		}
	}
	// Under the cap is fine.
	cfg := rich(ShellQuote(echoAgent))
	cfg.MaxOutputBytes = 1 << 20
	f = newFixture(t, cfg)
	wantResult(t, f.text("/flood 500000"), "stop", "flooded")
	res = f.text("/flood 2000000")
	if res.Text != "agent output over 1 MiB" {
		t.Errorf("flood over the cap: %q", clip(res.Text))
	}
}

func TestNonUTF8(t *testing.T) {
	t.Parallel()
	for _, cfg := range []config.TerminalAgent{
		rich(ShellQuote(echoAgent)),
		plain(`printf 'bad \377\376 out\n'; printf 'bad \377 err\n' >&2`),
		rich(`printf '{"type":"message","text":"in \377 frame"}\n'`),
	} {
		f := newFixture(t, cfg)
		res := f.text("/binary")
		if !utf8.ValidString(res.Text) || !strings.Contains(res.Text, "\uFFFD") {
			t.Errorf("%s: reply %q", cfg.Command, res.Text)
		}
		if _, err := json.Marshal(res); err != nil {
			t.Error(err)
		}
	}
}

func TestAgentNotFound(t *testing.T) {
	t.Parallel()
	for _, command := range []string{"no-such-agent-x1 --flag", "/no/such/dir/agent {message}",
		"no-such-agent-x1 --flag;", "/no/such/dir/agent {message};"} {
		f := newFixture(t, rich(command))
		res := f.text("x")
		name := strings.Fields(command)[0]
		wantResult(t, res, "error", "agent command not found: "+name, "(exit code 127)")
		if !strings.HasPrefix(res.Text, "agent command not found: "+name+"\n\nSTDERR: ") {
			t.Errorf("reply %q", res.Text)
		}
	}
	noExec := writeScript(t, "echo hi")
	os.Chmod(noExec, 0o644)
	for _, command := range []string{noExec, noExec + ";"} {
		f := newFixture(t, rich(command))
		wantResult(t, f.text("x"), "error", "agent command cannot be executed: "+command)
	}
}

func TestEnvMerge(t *testing.T) {
	t.Setenv("TERMLINK_PARENT_ONLY", "parent")
	t.Setenv("TERMLINK_OVERRIDDEN", "parent")
	for _, mode := range startModes {
		cfg := plain(agentCommand(t, mode, `printf '%s|%s|%s' "$TERMLINK_PARENT_ONLY" "$TERMLINK_OVERRIDDEN" "$CUSTOM_VAR"; env | grep -c '^TERMLINK_OVERRIDDEN='`))
		cfg.Env = map[string]string{"TERMLINK_OVERRIDDEN": "config", "CUSTOM_VAR": "a b=c 'd'"}
		f := newFixture(t, cfg)
		if res := f.text("x"); res.Text != "parent|config|a b=c 'd'1" {
			t.Fatalf("%s: env: %q", mode, res.Text)
		}
		// The Go agent sees it too.
		cfg = rich(goAgentCommand(t, mode, ""))
		cfg.Env = map[string]string{"CUSTOM_VAR": "value"}
		f = newFixture(t, cfg)
		if res := f.text("/env CUSTOM_VAR"); res.Text != "value" {
			t.Fatalf("%s: env: %q", mode, res.Text)
		}
	}
	// PATH from the config finds the program, relative entries from the
	// workspace (as sh finds it).
	for _, mode := range startModes {
		command := "agent-on-path {message}"
		if mode == "shell" {
			command += ";"
		}
		checkMode(t, mode, command)
		cfg := plain(command)
		cfg.Env = map[string]string{"PATH": "bin:/usr/bin:/bin"}
		f := newFixture(t, cfg)
		os.Mkdir(filepath.Join(f.ws, "bin"), 0o755)
		f.script("bin/agent-on-path", `printf '%s|' "$@"`)
		if res := f.text("a b"); res.Text != "a b|" {
			t.Fatalf("%s: argv %q", mode, res.Text)
		}
	}
}

func TestStdinNeverRead(t *testing.T) {
	t.Parallel()
	// An envelope far larger than a pipe buffer, to an agent that never
	// reads stdin (and one that keeps it open in a grandchild).
	for _, body := range []string{`echo ok`, `sleep 0.2; echo ok`, `(sleep 0.1 <&0) & echo ok`} {
		for _, mode := range startModes {
			t.Run(mode+" "+body, func(t *testing.T) {
				t.Parallel()
				command := agentCommand(t, mode, body)
				// A grace of seconds for the leftover sleep 0.1 (a loaded
				// machine took more than the default 200 ms): the run ends
				// when it closes stdout.
				f := newFixture(t, plain(command), Options{KillGrace: 30 * time.Second})
				res := f.text(strings.Repeat("z", 2<<20))
				// The agent exited on its own and nothing held its output:
				// the unread envelope neither blocked the run into the
				// timeout nor made the runner kill anything.
				wantResult(t, res, "stop", "ok")
				if f.logs.has("INFO killing the agent") || f.logs.has(msgLeftBehind) {
					t.Errorf("%s: %v", command, f.logs.all())
				}
			})
		}
	}
}

func TestConcurrentRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t, rich(ShellQuote(echoAgent)+" -progress"))
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := f.req(fmt.Sprintf("msg %d", i))
			req.ChatID = fmt.Sprintf("peer%d", i%4)
			res, progress := f.run(context.Background(), req)
			if res.Text != fmt.Sprintf("You said: msg %d", i) || res.FinishReason != "stop" || len(progress) != 1 {
				t.Errorf("run %d: %+v %v", i, res, progress)
			}
		}()
	}
	wg.Wait()
}

func TestPythonExamples(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed; the Python example agents cannot run")
	}
	dir, err := filepath.Abs("../../../testrig/agents/python")
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, rich("python3 "+ShellQuote(filepath.Join(dir, "quickstart.py"))))
	res, progress := f.run(context.Background(), f.req("hello 'py'"))
	if res.Text != "You said: hello 'py'" || res.FinishReason != "stop" || !reflect.DeepEqual(progress, []string{"Thinking..."}) {
		t.Fatalf("quickstart: %+v %v", res, progress)
	}

	f = newFixture(t, rich(ShellQuote(filepath.Join(dir, "stateful.py"))))
	for i := 1; i <= 3; i++ {
		res := f.text("again")
		if want := fmt.Sprintf("Got it! (message #%d)", i); res.Text != want || res.FinishReason != "stop" {
			t.Fatalf("stateful run %d: %+v", i, res)
		}
	}
	other := f.req("first")
	other.ChatID = "peer2"
	if res, _ := f.run(context.Background(), other); res.Text != "Got it! (message #1)" {
		t.Fatalf("other user: %+v", res)
	}
	state, err := os.ReadFile(filepath.Join(f.ws, "users", "peer1", "state.json"))
	if err != nil || !strings.Contains(string(state), `"message_count": 3`) {
		t.Fatalf("state.json: %s %v", state, err)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	bad := []config.TerminalAgent{
		{Command: ""},
		{Command: "  "},
		{Command: "a\x00b"},
		{Command: "a", Protocol: "jsonl"},
		{Command: "a", Timeout: -1},
		{Command: "a", MaxOutputBytes: -1},
		{Command: "a", Env: map[string]string{"A=B": "x"}},
	}
	for _, cfg := range bad {
		if _, err := New("bad", cfg, Options{}); err == nil || !strings.Contains(err.Error(), `"bad"`) {
			t.Errorf("New(%+v) = %v, want an error naming the agent", cfg, err)
		}
	}
	r, err := New("ok", config.TerminalAgent{Command: "echo"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.cfg.Timeout != 120 || r.cfg.Protocol != "plain" || r.cfg.MaxOutputBytes != 4<<20 || r.opt.MaxLineBytes != 1<<20 {
		t.Errorf("defaults: %+v %+v", r.cfg, r.opt)
	}
	r.Close()
}

// TestReadmeConfigs checks that the agents blocks in testrig/agents/README.md
// are valid server config.
func TestReadmeConfigs(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../../testrig/agents/README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(readme), "```json\n")[1:]
	if len(blocks) < 4 {
		t.Fatalf("%d json blocks in the README", len(blocks))
	}
	for _, b := range blocks {
		b, _, _ = strings.Cut(b, "```")
		if !strings.Contains(b, `"terminal"`) {
			continue // another agent kind's example
		}
		if !strings.HasPrefix(b, "{") {
			b = `{"channels": {"c": {"accountId": "local", "agent": "echo"}}, ` + b + "}"
		}
		cfg, err := config.Parse([]byte(b))
		if err != nil {
			t.Errorf("README config:\n%s\n%v", b, err)
			continue
		}
		for name, a := range cfg.Agents {
			if a.Terminal == nil {
				continue
			}
			if _, err := New(name, *a.Terminal, Options{}); err != nil {
				t.Errorf("README agent %s: %v", name, err)
			}
		}
	}
}

// TestDirectStartHasNoShell: a command of plain words runs with nothing
// between the server and the program: the agent's parent is this process.
func TestDirectStartHasNoShell(t *testing.T) {
	t.Parallel()
	f := newFixture(t, plain(agentCommand(t, "direct", `echo $PPID`)))
	if res := f.text("x"); strings.TrimSpace(res.Text) != strconv.Itoa(os.Getpid()) {
		t.Errorf("the agent's parent is %q, not the server (%d)", res.Text, os.Getpid())
	}
}

// An agent printing 10,000 progress lines costs a few progress updates
// (what reaches the bus), not 10,000; the last one still arrives. Issue 16.
func TestProgressCoalesced(t *testing.T) {
	t.Parallel()
	script := writeScript(t, `read -r line
i=0
while [ $i -lt 10000 ]; do
	printf '{"type":"progress","text":"line %d"}\n' $i
	i=$((i+1))
done
printf '%s\n' '{"type":"message","text":"done"}'
`)
	// A grace of seconds: 10,000 lines written at once are read well
	// after the agent exited on a loaded machine, and past the default
	// 200 ms the runner takes the unread rest for a leftover process's
	// and drops it ("done" with it).
	f := newFixture(t, rich(script), Options{ProgressInterval: 100 * time.Millisecond, KillGrace: 30 * time.Second})
	start := time.Now()
	res, progress := f.run(context.Background(), f.req("go"))
	elapsed := time.Since(start)
	wantResult(t, res, "stop", "done")
	// One at once, at most one per interval after it, and the last at the end.
	limit := int(elapsed/(100*time.Millisecond)) + 2
	t.Logf("10000 progress lines in %s: %d updates (limit %d)", elapsed, len(progress), limit)
	if len(progress) > limit || len(progress) == 0 {
		t.Fatalf("%d progress updates for 10000 progress lines in %s, want at most %d", len(progress), elapsed, limit)
	}
	if progress[0] != "line 0" || progress[len(progress)-1] != "line 9999" {
		t.Fatalf("first %q, last %q: want the first at once and the last kept", progress[0], progress[len(progress)-1])
	}
}

// Output the agent wrote before it exited is all delivered even when the
// machine is slow to run the reader: the stdout reader here starts only
// after three kill grace periods (1 ms each) have ended, long after the
// agent exited. The runs's pipes are closed only once nothing is left
// unread in them; before, the second grace period's end closed them and
// the reply was empty (TestProgressCoalescedEndToEnd's "(no output)" on
// a loaded machine).
func TestOutputKeptFromASlowReader(t *testing.T) {
	t.Parallel()
	for _, cfg := range []config.TerminalAgent{plain(`echo one; echo two`), rich(`echo '{"type":"message","text":"one two"}'`)} {
		t.Run(cfg.Protocol, func(t *testing.T) {
			t.Parallel()
			graces, stopped := make(chan struct{}, 100), make(chan struct{})
			opt := Options{KillGrace: time.Millisecond}
			opt.hooks = testHooks{
				graceEnded:   func() { graces <- struct{}{} },
				readsStopped: func() { close(stopped) },
				readStart: func() {
					for range 3 {
						select {
						case <-graces:
						case <-stopped: // the run gave up on the output: the test fails
							return
						}
					}
				},
			}
			f := newFixture(t, cfg, opt)
			res := f.text("x")
			want := "one\ntwo"
			if cfg.Protocol == "rich" {
				want = "one two"
			}
			wantResult(t, res, "stop", want)
			if f.logs.has("no longer reading") {
				t.Errorf("the run stopped reading the agent's output: %v", f.logs.all())
			}
		})
	}
}
