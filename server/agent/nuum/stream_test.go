package nuum

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/server/agent"
	"termlink/server/config"

	"termlink/internal/testwait"
)

// chunks records what a run streams (Request.Stream) and whether any
// chunk came after Run returned.
type chunks struct {
	mu       sync.Mutex
	list     []string
	returned bool
	late     int
}

func (c *chunks) write(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = append(c.list, s)
	if c.returned {
		c.late++
	}
}

func (c *chunks) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.list, "")
}

func (c *chunks) snapshot() (n, late int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.list), c.late
}

// waitText waits (generously) until the streamed text is want.
func (c *chunks) waitText(tb testing.TB, want string) {
	tb.Helper()
	testwait.UntilOK(tb, fmt.Sprintf("the streamed text %q", want), func() error {
		if got := c.text(); got != want {
			return fmt.Errorf("streamed %q", got)
		}
		return nil
	})
}

// waitPrefix waits until the streamed text begins with want (a stream
// that goes on may be past it at the next look).
func (c *chunks) waitPrefix(tb testing.TB, want string) {
	tb.Helper()
	testwait.UntilOK(tb, fmt.Sprintf("the streamed text to begin with %q", want), func() error {
		if got := c.text(); !strings.HasPrefix(got, want) {
			return fmt.Errorf("streamed %q", got)
		}
		return nil
	})
}

// streamRun starts a run of text with Stream recording into c.
func streamRun(ctx context.Context, r *Runner, key, text string, c *chunks) <-chan agent.Result {
	rc := &recorder{}
	req := rc.Req(key, text)
	if c != nil {
		req.Stream = c.write
	}
	done := make(chan agent.Result, 1)
	go func() {
		res := r.Run(ctx, req, rc.Progress)
		if c != nil {
			c.mu.Lock()
			c.returned = true
			c.mu.Unlock()
		}
		done <- res
	}()
	return done
}

func awaitResult(tb testing.TB, done <-chan agent.Result) agent.Result {
	tb.Helper()
	select {
	case res := <-done:
		return res
	case <-time.After(testwait.Deadline):
		tb.Fatal("Run did not return")
		return agent.Result{}
	}
}

// dialects are the example agent's two: Nuum, and Claude Code's
// stream-json subset.
var dialects = []string{"", "--claude"}

func streamRunner(t *testing.T, flags string) *Runner {
	return newRunner(t, flags, func(_ *config.NuumAgent, o *Options) { o.HeartbeatAckOptional = true })
}

// Claude's partial text deltas reach Request.Stream while the turn runs
// (the agent waits for a file the test creates only once it has the
// first chunk), and the assistant frame that then carries the whole text
// is not streamed again: the reply equals what was streamed.
func TestStreamPartialDeltasWhileTheTurnRuns(t *testing.T) {
	t.Parallel()
	for _, flags := range dialects {
		t.Run("flags="+flags, func(t *testing.T) {
			t.Parallel()
			r := streamRunner(t, flags)
			gate := filepath.Join(t.TempDir(), "go-on")
			var c chunks
			done := streamRun(context.Background(), r, "s1", "/stream-wait "+gate, &c)
			c.waitText(t, "before ")
			select {
			case res := <-done:
				t.Fatalf("Run returned %+v before the agent went on", res)
			default:
			}
			if err := os.WriteFile(gate, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			res := awaitResult(t, done)
			if res.FinishReason != finishStop || res.Text != "before after" || c.text() != res.Text {
				t.Fatalf("reply %+v, streamed %q; want both %q", res, c.text(), "before after")
			}
			if n, late := c.snapshot(); n != 2 || late != 0 {
				t.Fatalf("%d chunks (%d after Run returned), want the 2 deltas", n, late)
			}
		})
	}
}

// Many deltas arrive in order, each passed on as it came.
func TestStreamPartialDeltasInOrder(t *testing.T) {
	t.Parallel()
	r := streamRunner(t, "--claude")
	var c chunks
	res := awaitResult(t, streamRun(context.Background(), r, "s1", "/stream 60 1", &c))
	var want []string
	for i := 1; i <= 60; i++ {
		want = append(want, fmt.Sprintf("w%d", i))
	}
	if w := strings.Join(want, " "); res.Text != w || c.text() != w {
		t.Fatalf("reply %q, streamed %q; want %q", res.Text, c.text(), w)
	}
	if n, _ := c.snapshot(); n != 60 {
		t.Fatalf("%d chunks, want one per delta (60)", n)
	}
}

// Without partial deltas, each assistant step is streamed as it
// arrives, joined as the reply joins them.
func TestStreamAssistantSteps(t *testing.T) {
	t.Parallel()
	r := streamRunner(t, "")
	var c chunks
	res := awaitResult(t, streamRun(context.Background(), r, "s1", "/steps-noresult Hello|  |world", &c))
	if res.Text != "Hello\nworld" || c.text() != res.Text {
		t.Fatalf("reply %q, streamed %q", res.Text, c.text())
	}
	var c2 chunks
	res = awaitResult(t, streamRun(context.Background(), r, "s1", "plain", &c2))
	if res.Text != "You said: plain" || c2.text() != res.Text {
		t.Fatalf("reply %q, streamed %q", res.Text, c2.text())
	}
}

// With Stream nil the replies are what they were.
func TestStreamNilReplyUnchanged(t *testing.T) {
	t.Parallel()
	for _, flags := range dialects {
		r := streamRunner(t, flags)
		for text, want := range map[string]string{"/stream 3 0": "w1 w2 w3", "/steps a|b": "b", "hi": "You said: hi"} {
			if res := awaitResult(t, streamRun(context.Background(), r, "s1", text, nil)); res.Text != want || res.FinishReason != finishStop {
				t.Errorf("%q %s: reply %+v, want %q", flags, text, res, want)
			}
		}
	}
}

// Cancelling mid-stream interrupts the turn: the reply is cancelled and
// nothing is streamed after Run returned.
func TestStreamCancelledMidStream(t *testing.T) {
	t.Parallel()
	r := streamRunner(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var c chunks
	done := streamRun(ctx, r, "s1", "/stream 100000 20", &c)
	c.waitPrefix(t, "w1 w2")
	cancel()
	res := awaitResult(t, done)
	if res.FinishReason != finishCancelled {
		t.Fatalf("reply %+v, want cancelled", res)
	}
	n, _ := c.snapshot()
	// The session's agent goes on answering: its answer is read after
	// anything the cancelled turn still wrote (one stdout, in order).
	if res := awaitResult(t, streamRun(context.Background(), r, "s1", "again", nil)); res.Text != "You said: again" {
		t.Fatalf("after the cancel: %+v", res)
	}
	if n2, late := c.snapshot(); n2 != n || late != 0 || !strings.HasPrefix(c.text(), "w1 w2") {
		t.Fatalf("streamed %q: %d chunks, then %d (%d after Run returned)", c.text(), n, n2, late)
	}
}

// scriptAgent is a sh agent that says init, then answers its Nth user
// message with the lines of turns[N-1] (and ignores heartbeats).
func scriptAgent(t *testing.T, turns ...string) *Runner {
	t.Helper()
	dir := t.TempDir()
	for i, turn := range turns {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("turn%d", i+1)), []byte(turn), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(dir, "agent.sh")
	body := `#!/bin/sh
printf '%s\n' '{"type":"system","subtype":"init","session_id":"s"}'
n=0
while IFS= read -r line; do
  case "$line" in *'"user"'*) ;; *) continue ;; esac
  n=$((n+1))
  cat "` + dir + `/turn$n"
done
`
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	r, err := New("script", config.NuumAgent{Command: shellQuote(script), MaxProcesses: 2}, func() Options {
		o := testOptions(t)
		o.HeartbeatAckOptional = true
		return o
	}())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func ev(event string) string {
	return `{"type":"stream_event","event":` + event + `,"session_id":"s","parent_tool_use_id":null,"uuid":"u"}`
}

func textDelta(index int, text string) string {
	return ev(fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":%q}}`, index, text))
}

func assistant(blocks string) string {
	return `{"type":"assistant","message":{"role":"assistant","content":[` + blocks + `]},"session_id":"s","parent_tool_use_id":null}`
}

// What Claude Code's stream-json sends around the text: blank blocks,
// tool input deltas, a subagent's deltas, several blocks and messages.
// Only the reply's text is streamed, each piece once, as the reply joins
// it; an assistant message that does not continue its streamed deltas
// stops the streaming (the final reply replaces it, logged).
func TestStreamClaudePartialMessages(t *testing.T) {
	t.Parallel()
	lines := func(ls ...string) string { return strings.Join(ls, "\n") + "\n" }
	r := scriptAgent(t,
		lines(
			ev(`{"type":"message_start","message":{"role":"assistant","content":[]}}`),
			ev(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
			textDelta(0, "  "),
			ev(`{"type":"content_block_stop","index":0}`),
			ev(`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"He"}}`),
			textDelta(1, "l"),
			textDelta(1, "lo"),
			ev(`{"type":"content_block_stop","index":1}`),
			ev(`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t1","name":"Task","input":{}}}`),
			ev(`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"x\""}}`),
			ev(`{"type":"content_block_stop","index":2}`),
			`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"SUBAGENT"}},"parent_tool_use_id":"t1"}`,
			ev(`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}`),
			ev(`{"type":"message_stop"}`),
			assistant(`{"type":"text","text":"  "},{"type":"text","text":"Hello"},{"type":"tool_use","id":"t1","name":"Task","input":{}}`),
			`{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]},"session_id":"s"}`,
			assistant(`{"type":"text","text":"World"}`),
			textDelta(0, "Fin"),
			textDelta(0, "al"),
			assistant(`{"type":"text","text":"Final"}`),
			`{"type":"result","subtype":"success","is_error":false,"session_id":"s"}`,
		),
		lines(
			textDelta(0, "Goo"),
			assistant(`{"type":"text","text":"Bad"}`),
			textDelta(0, "more"),
			assistant(`{"type":"text","text":"more"}`),
			`{"type":"result","subtype":"success","is_error":false,"result":"Bad\nmore","session_id":"s"}`,
		),
	)
	var c chunks
	res := awaitResult(t, streamRun(context.Background(), r, "s1", "one", &c))
	if want := "Hello\nWorld\nFinal"; res.Text != want || c.text() != want {
		t.Fatalf("reply %q, streamed %q; want both %q", res.Text, c.text(), want)
	}
	if got := strings.Join(c.list, "|"); got != "He|l|lo|\nWorld|\nFin|al" {
		t.Fatalf("chunks %q", got)
	}
	var c2 chunks
	res = awaitResult(t, streamRun(context.Background(), r, "s1", "two", &c2))
	if res.Text != "Bad\nmore" || c2.text() != "Goo" {
		t.Fatalf("reply %q, streamed %q; want %q and %q", res.Text, c2.text(), "Bad\nmore", "Goo")
	}
}
