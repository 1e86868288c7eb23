package acp

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/server/agent"
	"termlink/server/config"

	"termlink/internal/testwait"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]config.ACPAgent{
		"empty command":   {Command: " "},
		"bad permission":  {Command: "x", Permission: "always"},
		"negative idle":   {Command: "x", IdleTimeout: -1},
		"bad env":         {Command: "x", Env: map[string]string{"A=B": "1"}},
		"NUL in argument": {Command: "x", Args: []string{"a\x00"}},
	} {
		if _, err := New("a", cfg, Options{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A chat: the message chunks make the reply; turns reuse the process;
// the ACP session id is kept in the session metadata.
func TestChat(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil, nil)
	rc := &recorder{}
	if res := run(t, r, rc, "s", "hello"); res.FinishReason != "stop" || res.Text != "You said: hello" {
		t.Fatalf("result %+v", res)
	}
	pid := agentPID(t, r, "s")
	if got := agentPID(t, r, "s"); got != pid {
		t.Fatalf("pid changed from %d to %d", pid, got)
	}
	meta, _ := rc.Meta()
	id := meta[MetaSessionID]
	if id == nil || !strings.HasPrefix(id.(string), "sess_") {
		t.Fatalf("metadata %v", meta)
	}
	// Sessions have processes of their own.
	if other := agentPID(t, r, "other"); other == pid {
		t.Fatal("two sessions share a process")
	}
}

// tool_call, tool_call_update, plan and thoughts are progress lines;
// unknown update kinds are ignored.
func TestProgress(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil, nil)
	rc := &recorder{}
	if res := run(t, r, rc, "s", "/tool read_file"); res.Text != "used read_file" {
		t.Fatalf("result %+v", res)
	}
	if res := run(t, r, rc, "s", "/plan"); res.Text != "planned" {
		t.Fatalf("result %+v", res)
	}
	if res := run(t, r, rc, "s", "/thought"); res.Text != "thought" {
		t.Fatalf("result %+v", res)
	}
	if res := run(t, r, rc, "s", "/unknown"); res.Text != "ok" || res.FinishReason != "stop" {
		t.Fatalf("result %+v", res)
	}
	prog, events := rc.Snapshot()
	want := []string{"tool: read_file", "tool: read_file (running)", "tool: read_file (done)", "plan 1/3 done: write the fix", "thinking"}
	if !slices.Equal(prog, want) {
		t.Fatalf("progress %q, want %q", prog, want)
	}
	if !slices.Contains(events, "agent_tool_result read_file: completed") {
		t.Fatalf("events %q", events)
	}
}

func TestStopReasons(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil, nil)
	for stop, want := range map[string]string{"max_tokens": "length", "max_turn_requests": "max_turns", "refusal": "refusal", "cancelled": "cancelled", "end_turn": "stop"} {
		res := run(t, r, &recorder{}, "s", "/stop "+stop)
		if res.FinishReason != want {
			t.Errorf("stopReason %s: result %+v, want finish %s", stop, res, want)
		}
		if want != "stop" && res.Text == "" {
			t.Errorf("stopReason %s: empty text", stop)
		}
	}
}

// Permission requests by policy: reject (default) and allow_once.
func TestPermissionPolicy(t *testing.T) {
	t.Parallel()
	for policy, want := range map[string]string{"": "rejected", "reject": "rejected", "allow_once": "allowed"} {
		r := newRunner(t, nil, func(c *config.ACPAgent, _ *Options) { c.Permission = policy })
		rc := &recorder{Caps: []string{"progress"}}
		res := run(t, r, rc, "s", "/perm")
		if res.Text != want || res.FinishReason != "stop" {
			t.Errorf("policy %q: result %+v, want %q", policy, res, want)
		}
		_, events := rc.Snapshot()
		if !slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, "agent_permission Edit config.json") }) {
			t.Errorf("policy %q: events %q", policy, events)
		}
	}
}

// ask: the question is a progress line with numbered options; the next
// message (Inject) answers it; no answer in time rejects; a device without
// progress cannot see it and gets reject.
func TestPermissionAsk(t *testing.T) {
	t.Parallel()
	ask := func(c *config.ACPAgent, o *Options) { c.Permission = "ask"; o.AskTimeout = 10 * time.Second }
	r := newRunner(t, nil, ask)
	rc := &recorder{Caps: []string{"progress", "cancel"}}
	if r.Inject(context.Background(), rc.Req("s", "1")) {
		t.Fatal("Inject took a message with no question open")
	}
	for answer, want := range map[string]string{"1": "allowed", " 2 ": "rejected", "yes please": "rejected"} {
		res := runAsync(context.Background(), r, rc, "s", "/perm")
		waitProgress(t, rc, "Allow? Edit config.json: 1 Allow, 2 Skip (send the number)")
		if !r.Inject(context.Background(), rc.Req("s", answer)) {
			t.Fatalf("answer %q not taken", answer)
		}
		if got := await(t, res); got.Text != want {
			t.Fatalf("answer %q: result %+v, want %q", answer, got, want)
		}
		rc.Reset()
	}
	// Only one message answers a question; a message with none waits.
	res := runAsync(context.Background(), r, rc, "s", "/slow 300")
	waitTurn(t, r, "s")
	if r.Inject(context.Background(), rc.Req("s", "1")) {
		t.Fatal("Inject took a message while no question was open")
	}
	await(t, res)

	t.Run("timeout", func(t *testing.T) {
		r := newRunner(t, nil, func(c *config.ACPAgent, o *Options) { c.Permission = "ask"; o.AskTimeout = 200 * time.Millisecond })
		rc := &recorder{Caps: []string{"progress"}}
		if res := run(t, r, rc, "s", "/perm"); res.Text != "rejected" {
			t.Fatalf("result %+v", res)
		}
		waitProgress(t, rc, "no answer within 200ms: rejected")
	})
	t.Run("device without progress", func(t *testing.T) {
		r := newRunner(t, nil, ask)
		rc := &recorder{}
		if res := run(t, r, rc, "s", "/perm"); res.Text != "rejected" {
			t.Fatalf("result %+v", res)
		}
	})
}

// A cancel sends session/cancel: the prompt ends cancelled and the process
// stays; an open permission question is answered cancelled.
func TestCancel(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil, func(c *config.ACPAgent, _ *Options) { c.Permission = "ask" })
	rc := &recorder{Caps: []string{"progress"}}
	pid := agentPID(t, r, "s")
	ctx, cancel := context.WithCancel(context.Background())
	// The agent sends a word, then waits at a gate that never opens: the
	// word says the agent has the prompt (a cancel sent before it did
	// finds no turn, and the agent is killed after InterruptWait).
	var words chunkLog
	res := streamRun(ctx, r, rc, &words, "s", "/gate "+filepath.Join(t.TempDir(), "never")+" waiting here")
	testwait.Until(t, "the agent's first word", func() bool { _, n := words.text(); return n >= 1 })
	cancel()
	if got := await(t, res); got.FinishReason != "cancelled" {
		t.Fatalf("result %+v", got)
	}
	if got := agentPID(t, r, "s"); got != pid {
		t.Fatalf("pid changed from %d to %d", pid, got)
	}
	// The open question: the agent ends the turn cancelled only when the
	// permission request was answered cancelled (else it says
	// allowed/rejected).
	ctx, cancel = context.WithCancel(context.Background())
	res = runAsync(ctx, r, rc, "s", "/perm")
	waitProgress(t, rc, "Allow? Edit config.json")
	cancel()
	got := await(t, res)
	if got.FinishReason != "cancelled" || strings.Contains(got.Text, "rejected") || strings.Contains(got.Text, "allowed") {
		t.Fatalf("result %+v", got)
	}
	if r.Inject(context.Background(), rc.Req("s", "1")) {
		t.Fatal("a cancelled question took an answer")
	}
	if got := agentPID(t, r, "s"); got != pid {
		t.Fatalf("pid changed from %d to %d", pid, got)
	}
}

// JSON-RPC errors and auth failures are error replies whose first line
// says what to do.
func TestErrors(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil, nil)
	res := run(t, r, &recorder{}, "s", "/error")
	if res.FinishReason != "error" || firstLine(res.Text) != "The agent answered session/prompt with an error; send the message again, or check the agent's setup." ||
		!strings.Contains(res.Text, "something broke") {
		t.Fatalf("result %+v", res)
	}
	res = run(t, r, &recorder{}, "s", "/auth")
	if res.FinishReason != "error" || !strings.HasPrefix(res.Text, "Sign the agent in or give it its API key (agents.test.acp.env") ||
		!strings.Contains(res.Text, "the API key expired") {
		t.Fatalf("result %+v", res)
	}
	// The process survives errors.
	if res := run(t, r, &recorder{}, "s", "hi"); res.Text != "You said: hi" {
		t.Fatalf("result %+v", res)
	}
	t.Run("auth at session/new", func(t *testing.T) {
		r := newRunner(t, []string{"--auth-required"}, nil)
		res := run(t, r, &recorder{}, "s", "hi")
		if res.FinishReason != "error" || !strings.HasPrefix(res.Text, "Sign the agent in") || !strings.Contains(res.Text, "session/new") {
			t.Fatalf("result %+v", res)
		}
	})
	t.Run("protocol version", func(t *testing.T) {
		r := newRunner(t, []string{"--protocol", "2"}, nil)
		res := run(t, r, &recorder{}, "s", "hi")
		if res.FinishReason != "error" || firstLine(res.Text) != "Use an agent that speaks ACP version 1: this one answered version 2." {
			t.Fatalf("result %+v", res)
		}
	})
	t.Run("silent", func(t *testing.T) {
		r := newRunner(t, []string{"--silent"}, func(_ *config.ACPAgent, o *Options) { o.StartTimeout = 300 * time.Millisecond })
		res := run(t, r, &recorder{}, "s", "hi")
		if res.FinishReason != "error" || !strings.HasPrefix(res.Text, "The agent did not answer initialize within 300ms; check that agents.test.acp.command") {
			t.Fatalf("result %+v", res)
		}
	})
	t.Run("not found", func(t *testing.T) {
		r := newRunner(t, nil, func(c *config.ACPAgent, _ *Options) { c.Command, c.Args = "no-such-acp-agent --acp", nil })
		res := run(t, r, &recorder{}, "s", "hi")
		if res.FinishReason != "error" || !strings.HasPrefix(res.Text, "Check agents.test.acp.command in the server config: the agent exited during initialize (exit status 127)") ||
			!strings.Contains(res.Text, "not found") {
			t.Fatalf("result %+v", res)
		}
	})
}

// A crash mid-turn is an error reply quoting stderr; the next message gets
// a fresh process.
func TestCrashAndRestart(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil, nil)
	pid := agentPID(t, r, "s")
	res := run(t, r, &recorder{}, "s", "/crash")
	if res.FinishReason != "error" || firstLine(res.Text) != "The agent stopped; send the message again to start a new one." ||
		!strings.Contains(res.Text, "exit status 3") || !strings.Contains(res.Text, "crashing as asked") {
		t.Fatalf("result %+v", res)
	}
	waitGone(t, pid)
	if got := agentPID(t, r, "s"); got == pid {
		t.Fatal("same pid after a crash")
	}
}

func TestIdleStop(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil, func(_ *config.ACPAgent, o *Options) { o.IdleTimeout = 300 * time.Millisecond })
	pid := agentPID(t, r, "s")
	waitGone(t, pid)
	testwait.Until(t, "no process live after the idle stop", func() bool { return r.Live() == 0 })
	if res := run(t, r, &recorder{}, "s", "again"); res.Text != "You said: again" {
		t.Fatalf("result %+v", res)
	}
}

// maxProcesses: the least recently used idle process makes room.
func TestMaxProcesses(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil, func(c *config.ACPAgent, _ *Options) { c.MaxProcesses = 2 })
	a := agentPID(t, r, "a")
	agentPID(t, r, "b")
	agentPID(t, r, "c")
	waitGone(t, a)
	if n := r.Live(); n > 2 {
		t.Fatalf("%d processes live, max 2", n)
	}
}

// The session cwd is the workspace, or the config's cwd inside it; media
// go as resource links.
func TestCwdAndMedia(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	if err := os.Mkdir(filepath.Join(ws, "proj"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, nil, func(c *config.ACPAgent, _ *Options) { c.Cwd = "proj" })
	rc := &recorder{Workspace: ws}
	if res := run(t, r, rc, "s", "/cwd"); res.Text != "cwd "+filepath.Join(ws, "proj") {
		t.Fatalf("result %+v", res)
	}
	req := rc.Req("s", "see")
	req.Media = []string{"/tmp/a b.png"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res := r.Run(ctx, req, nil); res.Text != "You said: see [file:///tmp/a%20b.png]" {
		t.Fatalf("result %+v", res)
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil, nil)
	pid := agentPID(t, r, "s")
	res := runAsync(context.Background(), r, &recorder{}, "s", "/slow 10000")
	waitTurn(t, r, "s")
	r.Close()
	if got := await(t, res); got.FinishReason == "stop" {
		t.Fatalf("result %+v", got)
	}
	waitGone(t, pid)
	if res := run(t, r, &recorder{}, "s", "hi"); res.FinishReason != "error" {
		t.Fatalf("run after Close: %+v", res)
	}
}

// The SDK's example agent, an independent implementation: a full turn with
// chunks, tool calls and a permission request.
func TestSDKExampleAgent(t *testing.T) {
	t.Parallel()
	r, err := New("example", config.ACPAgent{Command: sdkAgentBin, Args: []string{}, Permission: "allow_once"}, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rc := &recorder{Caps: []string{"progress"}}
	res := run(t, r, rc, "s", "hello")
	if res.FinishReason != "stop" || !strings.HasPrefix(res.Text, "ACP Go Example Agent") || !strings.Contains(res.Text, "Perfect! I've successfully updated the configuration.") {
		t.Fatalf("result %+v", res)
	}
	prog, _ := rc.Snapshot()
	for _, want := range []string{"tool: Reading project files", "tool: Reading project files (done)", "permission allow once: Modifying critical configuration file"} {
		if !slices.Contains(prog, want) {
			t.Errorf("progress %q lacks %q", prog, want)
		}
	}
}

// chunkLog keeps the chunks a run streams and when the first came.
type chunkLog struct {
	mu     sync.Mutex
	chunks []string
}

func (c *chunkLog) add(s string) {
	c.mu.Lock()
	c.chunks = append(c.chunks, s)
	c.mu.Unlock()
}

func (c *chunkLog) text() (string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.chunks, ""), len(c.chunks)
}

// streamRun starts a run of text whose Request.Stream records into log.
func streamRun(ctx context.Context, r *Runner, rc *recorder, log *chunkLog, key, text string) <-chan agent.Result {
	req := rc.Req(key, text)
	req.Stream = log.add
	ch := make(chan agent.Result, 1)
	go func() { ch <- r.Run(ctx, req, rc.Progress) }()
	return ch
}

// Each agent_message_chunk is streamed as it arrives, while the turn
// goes on; the chunks add up to the reply. Without Stream the reply is
// the same.
func TestStreamChunks(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil, nil)
	rc := &recorder{Caps: []string{"stream"}}
	var log chunkLog
	words := strings.Fields(strings.Repeat("one two three four five ", 4))
	want := strings.Join(words, " ")
	// The agent sends its first word, then waits for the gate file: the
	// first chunk is streamed while the run goes on.
	gate := filepath.Join(t.TempDir(), "gate")
	res := streamRun(context.Background(), r, rc, &log, "s", "/gate "+gate+" "+want)
	testwait.Until(t, "a chunk streamed while the agent waits", func() bool { _, n := log.text(); return n >= 1 })
	if text, _ := log.text(); text != "one" {
		t.Fatalf("streamed first %q, want the first word", text)
	}
	select {
	case got := <-res:
		t.Fatalf("the run ended (%+v) while the agent waits at its gate", got)
	default:
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	got := await(t, res)
	text, n := log.text()
	if got.FinishReason != "stop" || got.Text != want || text != got.Text || n != len(words) {
		t.Fatalf("result %+v; streamed %d chunks %q, want %d adding up to the reply", got, n, text, len(words))
	}
	// Stream nil: the same reply.
	if res := run(t, r, rc, "s", "/stream 1 one two three"); res.Text != "one two three" || res.FinishReason != "stop" {
		t.Fatalf("without Stream: %+v", res)
	}
}

// A cancel mid-stream ends the turn cancelled: the streamed words are
// the start of the reply, and nothing streams after it.
func TestStreamCancelled(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil, nil)
	rc := &recorder{Caps: []string{"stream"}}
	var log chunkLog
	ctx, cancel := context.WithCancel(context.Background())
	// The agent waits at a gate that never opens, after its first word.
	res := streamRun(ctx, r, rc, &log, "s", "/gate "+filepath.Join(t.TempDir(), "never")+" "+strings.Repeat("word ", 100))
	testwait.Until(t, "a chunk streamed", func() bool { _, n := log.text(); return n >= 1 })
	cancel()
	got := await(t, res)
	text, n := log.text()
	if got.FinishReason != "cancelled" || !strings.HasPrefix(got.Text, text) || n != 1 {
		t.Fatalf("result %+v after %d chunks %q: want cancelled, streamed text its start", got, n, text)
	}
	// The session's next answer is read after anything the cancelled
	// prompt still wrote (one stdout, in order).
	if res := run(t, r, rc, "s", "again"); res.Text != "You said: again" {
		t.Fatalf("after the cancel: %+v", res)
	}
	if after, m := log.text(); m != n {
		t.Fatalf("streamed after the run ended: %q", after[len(text):])
	}
}

// Past MaxReplyBytes the reply is cut, and so is the stream: what was
// streamed stays the start of the reply.
func TestStreamCutWithTheReply(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil, func(_ *config.ACPAgent, o *Options) { o.MaxReplyBytes = 10 })
	rc := &recorder{Caps: []string{"stream"}}
	var log chunkLog
	got := await(t, streamRun(context.Background(), r, rc, &log, "s", "/chunks 25"))
	text, _ := log.text()
	if text != strings.Repeat("x", 10) || !strings.HasPrefix(got.Text, text) || !strings.Contains(got.Text, "reply cut") {
		t.Fatalf("streamed %q, result %+v", text, got)
	}
}
